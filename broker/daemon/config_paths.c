/*
 * tsec-broker's configuration: every file and folder it names, checked
 * as written before anything is read from it (common/trust.c).
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "broker/daemon/daemon.h"
#include "common/error.h"
#include "common/trust.h"

/*
 * Every file and folder the configuration names, checked as written
 * (common/trust.c): the path's folders and links the broker user's or
 * root's and writable by nobody else (a sticky folder aside), and the
 * file itself so too; a TLS client key readable by nobody else.  Key,
 * password and secret files are checked so where they are read
 * (envelope.c), and the storage root and blob folder where they are
 * opened; a missing state_dir or decision log is made later, in a folder
 * checked here; another missing file is said by what reads it.  0, or the
 * error with why in *out.
 */
int tsec__cfg_paths(const struct tsec__config *c, struct tsec_error *out)
{
	const struct {
		const char *path, *role;
		enum tsec__trust_kind kind;
		bool may_be_missing;
	} files[] = {
		{ c->module, "the module", TSEC__TRUST_FILE, false },
		{ c->policy, "the policy", TSEC__TRUST_FILE, false },
		{ c->st.tls_ca, "storage's tls_ca", TSEC__TRUST_FILE, false },
		{ c->st.tls_cert, "storage's tls_cert", TSEC__TRUST_FILE, false },
		{ c->st.tls_key, "storage's tls_key", TSEC__TRUST_SECRET, false },
		{ c->remote.s3_ca_file, "remote's s3_ca_file", TSEC__TRUST_FILE, false },
		{ c->state_dir, "state_dir", TSEC__TRUST_FOLDER, true },
		{ c->decision_log, "the decision log", TSEC__TRUST_FILE, true },
	};

	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		struct tsec__trusted t;
		struct tsec_error err;
		int rc;

		if (!files[i].path)
			continue;
		rc = tsec__trusted_open(files[i].path, files[i].kind, false, files[i].role, &t,
					&err);
		/* Not there: said by whatever reads it (a reload names what
		 * changed), or made later (below). */
		if (rc == TSEC_ENOENT && !files[i].may_be_missing)
			continue;
		if (rc == TSEC_ENOENT) {
			/* To be made: the folder it will be made in. */
			char dir[PATH_MAX], *slash;

			snprintf(dir, sizeof(dir), "%s", files[i].path);
			slash = strrchr(dir, '/');
			if (!slash)
				snprintf(dir, sizeof(dir), ".");
			else
				slash[slash == dir] = '\0';
			rc = tsec__trusted_open(dir, TSEC__TRUST_FOLDER, false, "the folder of",
						&t, &err);
			if (rc == TSEC_ENOENT)
				continue;
			if (rc)
				snprintf(err.msg + strlen(err.msg), sizeof(err.msg) - strlen(err.msg),
					 " (%s %s would be made there)", files[i].role,
					 files[i].path);
		}
		if (rc)
			return tsec__seterr(out, rc, "", "config: %s", err.msg);
		close(t.fd);
	}
	return 0;
}

