/*
 * store_xml.h
 *     The stores' XML answers (store_xml.c, the one file that calls
 *     libxml2): listing pages and error documents.
 */
#ifndef FINALIZE_STORE_XML_H
#define FINALIZE_STORE_XML_H

#include "store/listing.h"

extern void store_xml_error(const char *body, size_t len, long status, StoreError *err);
extern bool store_xml_s3_page(const char *body, size_t len, Inventory *out, bool *truncated, char **next_token,
							  StoreError *err);
extern bool store_xml_azure_page(const char *body, size_t len, Inventory *out, char **next_marker,
								 StoreError *err);

#endif							/* FINALIZE_STORE_XML_H */
