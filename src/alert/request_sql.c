/*
 * request_sql.c
 *     finalize_internal.alert_request(format, url, event, secrets): the request the
 *     alerts worker would send, for tests of the formats without a network.
 *     Not granted to anyone: its headers carry the secrets it is given.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"

#include "alert/payload.h"

PG_FUNCTION_INFO_V1(finalize_alert_request);

/* A string member of a jsonb object, or NULL. */
static const char *
secret(Jsonb *secrets, const char *key)
{
	JsonbValue	v;

	if (!JsonContainerIsObject(&secrets->root) ||
		getKeyJsonValueFromContainer(&secrets->root, key, strlen(key), &v) == NULL || v.type != jbvString)
		return NULL;
	return pnstrdup(v.val.string.val, v.val.string.len);
}

/* finalize_internal.alert_request(format, url, event, secrets) -> (request_url, headers, body) */
Datum
finalize_alert_request(PG_FUNCTION_ARGS)
{
	char	   *format = text_to_cstring(PG_GETARG_TEXT_PP(0));
	char	   *url = text_to_cstring(PG_GETARG_TEXT_PP(1));
	Jsonb	   *event = PG_GETARG_JSONB_P(2);
	Jsonb	   *secrets = PG_GETARG_JSONB_P(3);
	AlertSecrets sec;
	AlertRequest *req;
	char	   *error;
	TupleDesc	desc;
	Datum		values[3];
	bool		nulls[3] = {false, false, false};
	Datum	   *headers;
	int			n = 0;
	ListCell   *lc;

	sec.bearer_token = secret(secrets, "bearer_token");
	sec.routing_key = secret(secrets, "routing_key");
	sec.api_key = secret(secrets, "api_key");
	sec.hmac_key = secret(secrets, "hmac_key");
	req = alert_build_request(format, url, event, &sec, &error);
	if (req == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cannot build the request of format %s: %s", format, error)));
	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	headers = palloc(sizeof(Datum) * Max(list_length(req->headers), 1));
	foreach(lc, req->headers)
		headers[n++] = CStringGetTextDatum((char *) lfirst(lc));
	values[0] = CStringGetTextDatum(req->url);
	values[1] = PointerGetDatum(construct_array(headers, n, TEXTOID, -1, false, TYPALIGN_INT));
	values[2] = CStringGetTextDatum(req->body);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc), values, nulls)));
}
