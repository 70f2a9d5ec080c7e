/*
 * The store's backend for a layer above storage that asked the policy
 * already about what its calls stand for (the remote certificate store:
 * references and generation records, read and written after a decision
 * on the certificate they name; its sweep's candidates).  No policy is
 * asked here and no gate is taken: each call is the backend's own, with
 * the backend's promises (backend.h), and the layer above never holds
 * the backend itself (issue 53, item 2: broker/remote reached into the
 * store's struct at ten places).
 */
#include "broker/storage/backend.h"
#include "broker/storage/store_private.h"

int tsec__store_raw_get(struct tsec_store *s, const struct tsec__skey *k, size_t max,
			char **out, size_t *len, struct tsec_error *err)
{
	return s->be->ops->get(s->be, k, max, out, len, err);
}

int tsec__store_raw_get_many(struct tsec_store *s, const struct tsec__skey *k, size_t n,
			     size_t max, char **out, size_t *len, struct tsec_error *err)
{
	return s->be->ops->get_many(s->be, k, n, max, out, len, err);
}

int tsec__store_raw_kind(struct tsec_store *s, const struct tsec__skey *k, int *kind,
			 struct tsec_error *err)
{
	return s->be->ops->kind(s->be, k, kind, err);
}

int tsec__store_raw_list(struct tsec_store *s, const struct tsec__skey *prefix, int recursive,
			 struct tsec_strlist *out, struct tsec_error *err)
{
	return s->be->ops->list(s->be, prefix, recursive, out, err);
}

int tsec__store_raw_put_many(struct tsec_store *s, const struct tsec__bput *p, size_t n,
			     struct tsec_error *err)
{
	return s->be->ops->put_many(s->be, p, n, NULL, NULL, err);
}

int tsec__store_raw_del(struct tsec_store *s, const struct tsec__skey *k,
			struct tsec_error *err)
{
	return s->be->ops->del(s->be, k, 0, NULL, err);
}
