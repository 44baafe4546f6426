/*
 * azure_request.h
 *     What Azure Blob Storage requests are made of: URLs (a List Blobs
 *     page, a blob) and their authorization (Shared Key, SAS, bearer).
 */
#ifndef FINALIZE_AZURE_REQUEST_H
#define FINALIZE_AZURE_REQUEST_H

#include "core/http.h"
#include "store/objstore.h"

extern char *azure_list_url(const AzureLocation *az, const char *prefix, const char *marker);
extern char *azure_object_url(const AzureLocation *az, const char *key);
extern bool azure_authorize(const RemoteStore *rs, HttpClient *client, HttpRequest *req, const char *content_type,
							StoreError *err);

#endif							/* FINALIZE_AZURE_REQUEST_H */
