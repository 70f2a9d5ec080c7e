/* Internal: the limits the certificate cache's two files share. */
#ifndef TSEC_CERTCACHE_PRIVATE_H
#define TSEC_CERTCACHE_PRIVATE_H

#define NAME_MAX_LEN 253         /* a DNS name's longest text form */
#define NAMES_MAX 100            /* names indexed per certificate */

#endif
