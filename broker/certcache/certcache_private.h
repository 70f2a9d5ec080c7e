/* Internal: the limits the certificate cache's two files share. */
#ifndef TSEC_CERTCACHE_PRIVATE_H
#define TSEC_CERTCACHE_PRIVATE_H

#define NAME_MAX_LEN 253         /* a DNS name's longest text form */
#define NAMES_MAX 100            /* names indexed per certificate */

#include <stddef.h>
#include <stdint.h>

struct tsec_certcache;
struct tsec_error;
struct tsec__follow;

/* tsec_certcache_insert, with the certificate's id (its DER's SHA-256)
 * into id even when it was there already (TSEC_EEXIST). */
int tsec__certcache_insert_id(struct tsec_certcache *c, const char *pem, size_t len,
			      void *data, uint8_t id[32], struct tsec_error *err);

/* The cache's follower slot (certcache_follow.c keeps it). */
struct tsec__follow **tsec__certcache_follow_slot(struct tsec_certcache *c);

#endif
