/*
 * azure_token.h
 *     Microsoft Entra ID bearer tokens for Azure Storage (azure_token.c).
 */
#ifndef FINALIZE_AZURE_TOKEN_H
#define FINALIZE_AZURE_TOKEN_H

#include "core/http.h"
#include "store/objstore.h"

extern const char *azure_bearer_token(const RemoteStore *rs, HttpClient *client, StoreError *err);
extern void azure_forget_token(const RemoteStore *rs);

#endif							/* FINALIZE_AZURE_TOKEN_H */
