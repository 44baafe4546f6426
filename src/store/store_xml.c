/*
 * store_xml.c
 *     The stores' XML answers read with libxml2 (the one file that calls
 *     it): S3's ListObjectsV2 pages, Azure's List Blobs pages, and both
 *     stores' <Error><Code/><Message/></Error> documents.
 *
 * Nothing here raises for what a store sends: a document that is not what
 * was asked for is a MalformedResponse in err. A document that declares a
 * document type is refused unread (neither store sends one): its entities
 * are expanded each time a text is read (xmlNodeGetContent), and a 95 kB
 * page whose key refers 15,000 times to an entity of 50 kB reads as 750 MB.
 */
#include "postgres.h"

#include <libxml/parser.h>
#include <libxml/tree.h>

#include "common/base64.h"

#include "core/pg_compat.h"
#include "store/store_xml.h"

/* The text of an element's first child with a local name, or NULL. */
static char *
child_text(xmlNodePtr parent, const char *name)
{
	for (xmlNodePtr c = parent ? parent->children : NULL; c; c = c->next)
		if (c->type == XML_ELEMENT_NODE && strcmp((const char *) c->name, name) == 0)
		{
			xmlChar    *t = xmlNodeGetContent(c);
			char	   *s = pstrdup(t ? (const char *) t : "");

			xmlFree(t);
			return s;
		}
	return NULL;
}

/* An element's first child element with a local name, or NULL. */
static xmlNodePtr
child(xmlNodePtr parent, const char *name)
{
	for (xmlNodePtr c = parent ? parent->children : NULL; c; c = c->next)
		if (c->type == XML_ELEMENT_NODE && strcmp((const char *) c->name, name) == 0)
			return c;
	return NULL;
}

/* Parses an XML body; NULL when it is not XML, or declares a document type. */
static xmlDocPtr
parse_xml(const char *body, size_t len)
{
	xmlDocPtr	doc = xmlReadMemory(body ? body : "", (int) len, "store.xml", NULL,
									XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING | XML_PARSE_NOBLANKS);

	if (doc != NULL && (doc->intSubset != NULL || doc->extSubset != NULL))
	{
		xmlFreeDoc(doc);
		return NULL;
	}
	return doc;
}

/*
 * Reads the <Error><Code/><Message/></Error> of a failed request (S3's and
 * Azure's alike, Azure's AuthenticationErrorDetail added to the message)
 * into err; a body that is none is the status's error.
 */
void
store_xml_error(const char *body, size_t len, long status, StoreError *err)
{
	xmlDocPtr	doc = parse_xml(body, len);
	xmlNodePtr	root = doc ? xmlDocGetRootElement(doc) : NULL;

	if (root != NULL && strcmp((const char *) root->name, "Error") == 0)
	{
		char	   *code = child_text(root, "Code");
		char	   *message = child_text(root, "Message");
		/* Azure says why it refused credentials apart from its message. */
		char	   *detail = child_text(root, "AuthenticationErrorDetail");

		if (detail != NULL)
			message = psprintf("%s %s", message ? message : "", detail);
		store_set_error(err, status, code ? code : "UnknownError", message ? message : "");
	}
	else
		store_set_error(err, status, status >= 500 ? "ServerError" : "HttpError",
						psprintf("HTTP status %ld without an error document", status));
	if (doc)
		xmlFreeDoc(doc);
}

/*
 * The document of a listing's page, or NULL with err set when it is not
 * one whose root is named root_name (who: the store, as the error names it).
 */
static xmlDocPtr
page_document(const char *body, size_t len, const char *root_name, const char *who, StoreError *err)
{
	xmlDocPtr	doc = parse_xml(body, len);
	xmlNodePtr	root = doc ? xmlDocGetRootElement(doc) : NULL;

	if (root == NULL || strcmp((const char *) root->name, root_name) != 0)
	{
		store_set_error(err, 200, "MalformedResponse",
						doc ? psprintf("the answer is XML but not a %s", root_name) :
						psprintf("the answer is not well-formed XML, or declares a document type (%s sends none)", who));
		if (doc)
			xmlFreeDoc(doc);
		return NULL;
	}
	return doc;
}

/* An object's size as listed, into *n; false with err set when it is no size. */
static bool
listed_size(const char *key, const char *size, int64 *n, StoreError *err)
{
	char	   *end;
	long long	v;

	errno = 0;
	v = size ? strtoll(size, &end, 10) : -1;
	if (size == NULL || errno != 0 || *end != '\0' || v < 0 || end == size)
	{
		store_set_error(err, 200, "MalformedResponse",
						psprintf("object \"%s\" has the size \"%s\"", key, size ? size : ""));
		return false;
	}
	*n = (int64) v;
	return true;
}

/*
 * Reads one page of an S3 ListObjectsV2 answer into out. Returns false
 * with err set on a malformed document; sets *truncated and *next_token.
 * A page without IsTruncated is not taken for the last one, nor are
 * CommonPrefixes (a delimited listing's) taken for nothing: either would
 * hide objects.
 */
bool
store_xml_s3_page(const char *body, size_t len, Inventory *out, bool *truncated, char **next_token,
				  StoreError *err)
{
	xmlDocPtr	doc = page_document(body, len, "ListBucketResult", "S3", err);
	xmlNodePtr	root = doc ? xmlDocGetRootElement(doc) : NULL;
	char	   *t;

	if (doc == NULL)
		return false;
	for (xmlNodePtr c = root->children; c; c = c->next)
	{
		char	   *key;
		int64		n;

		if (c->type == XML_ELEMENT_NODE && strcmp((const char *) c->name, "CommonPrefixes") == 0)
		{
			store_set_error(err, 200, "MalformedResponse",
							"a listing without a delimiter has a <CommonPrefixes> element");
			xmlFreeDoc(doc);
			return false;
		}
		if (c->type != XML_ELEMENT_NODE || strcmp((const char *) c->name, "Contents") != 0)
			continue;
		key = child_text(c, "Key");
		if (key == NULL || child(c, "Size") == NULL)
		{
			store_set_error(err, 200, "MalformedResponse", "a <Contents> element lacks its <Key> or <Size>");
			xmlFreeDoc(doc);
			return false;
		}
		if (!listed_size(key, child_text(c, "Size"), &n, err))
		{
			xmlFreeDoc(doc);
			return false;
		}
		inventory_add(out, key, n, child_text(c, "ETag"));
	}
	t = child_text(root, "IsTruncated");
	*truncated = t != NULL && strcmp(t, "true") == 0;
	*next_token = child_text(root, "NextContinuationToken");
	xmlFreeDoc(doc);
	/* S3 always says whether more follows: a page that does not is no last page. */
	if (t == NULL || (!*truncated && strcmp(t, "false") != 0))
	{
		store_set_error(err, 200, "MalformedResponse", "a listing page without <IsTruncated> true or false");
		return false;
	}
	if (*truncated && (*next_token == NULL || (*next_token)[0] == '\0'))
	{
		store_set_error(err, 200, "MalformedResponse", "a truncated listing without a NextContinuationToken");
		return false;
	}
	return true;
}

/*
 * A blob's checksum as the gate compares it: its Content-MD5 as lower-case
 * hex (what S3's single-part ETags and a local store's checksums are) when
 * it has one, else its ETag.
 */
static char *
blob_checksum(xmlNodePtr props)
{
	char	   *md5 = child_text(props, "Content-MD5");
	compat_b64_byte raw[64];
	int			n;

	if (md5 != NULL && md5[0] != '\0' &&
		(n = pg_b64_decode(md5, strlen(md5), raw, sizeof(raw))) == 16)
	{
		char	   *hex = palloc(33);

		for (int i = 0; i < 16; i++)
			snprintf(hex + 2 * i, 3, "%02x", (unsigned char) raw[i]);
		return hex;
	}
	return child_text(props, "Etag");
}

/*
 * Whether a listed blob is a directory of a hierarchical namespace (ADLS
 * Gen2 through the Blob endpoint): a blob whose metadata says
 * hdi_isfolder=true, or whose ResourceType is directory. Not a file; the
 * caller asks only of a zero-length blob, since anyone who may write a
 * blob may set that metadata on a file with content too.
 */
static bool
blob_is_directory(xmlNodePtr blob, xmlNodePtr props)
{
	char	   *folder = child_text(child(blob, "Metadata"), "hdi_isfolder");
	char	   *type = child_text(props, "ResourceType");

	return (folder != NULL && pg_strcasecmp(folder, "true") == 0) ||
		(type != NULL && strcmp(type, "directory") == 0);
}

/* Adds one <Blob> of a page to out; false with err set when it is malformed. */
static bool
azure_blob(xmlNodePtr blob, Inventory *out, StoreError *err)
{
	xmlNodePtr	name = child(blob, "Name");
	xmlNodePtr	props = child(blob, "Properties");
	xmlChar    *encoded = name ? xmlGetProp(name, (const xmlChar *) "Encoded") : NULL;
	bool		is_encoded = encoded != NULL && strcmp((const char *) encoded, "true") == 0;
	char	   *key;
	int64		n;

	xmlFree(encoded);
	if (name == NULL || props == NULL)
	{
		store_set_error(err, 200, "MalformedResponse", "a <Blob> element lacks its <Name> or <Properties>");
		return false;
	}
	key = child_text(blob, "Name");
	if (is_encoded)
	{
		store_set_error(err, 200, "UnsupportedBlobName",
						psprintf("blob \"%s\" has a name that XML cannot carry (Azure sent it encoded)", key));
		return false;
	}
	if (!listed_size(key, child_text(props, "Content-Length"), &n, err))
		return false;
	if (n != 0 || !blob_is_directory(blob, props))
		inventory_add(out, key, n, blob_checksum(props));
	return true;
}

/*
 * Reads one page of an Azure List Blobs answer (flat, with metadata) into
 * out, leaving out a hierarchical namespace's directories. Returns false
 * with err set on a malformed document; *next_marker is the NextMarker,
 * empty on the last page. Azure always sends <Blobs> and <NextMarker>
 * (empty at the end): a page without them is not taken for the end of the
 * listing, nor is a <BlobPrefix> (a delimited listing's, which a flat one
 * never has) taken for nothing, since either would hide objects.
 */
bool
store_xml_azure_page(const char *body, size_t len, Inventory *out, char **next_marker, StoreError *err)
{
	xmlDocPtr	doc = page_document(body, len, "EnumerationResults", "Azure", err);
	xmlNodePtr	root;
	xmlNodePtr	blobs;

	if (doc == NULL)
		return false;
	root = xmlDocGetRootElement(doc);
	blobs = child(root, "Blobs");
	if (blobs == NULL || child(root, "NextMarker") == NULL)
	{
		store_set_error(err, 200, "MalformedResponse", "a List Blobs page lacks its <Blobs> or <NextMarker> element");
		xmlFreeDoc(doc);
		return false;
	}
	for (xmlNodePtr c = blobs->children; c; c = c->next)
	{
		bool		ok = true;

		if (c->type != XML_ELEMENT_NODE)
			continue;
		if (strcmp((const char *) c->name, "Blob") == 0)
			ok = azure_blob(c, out, err);
		else if (strcmp((const char *) c->name, "BlobPrefix") == 0)
		{
			store_set_error(err, 200, "MalformedResponse",
							"a List Blobs page without a delimiter has a <BlobPrefix> element");
			ok = false;
		}
		if (!ok)
		{
			xmlFreeDoc(doc);
			return false;
		}
	}
	*next_marker = child_text(root, "NextMarker");
	xmlFreeDoc(doc);
	return true;
}
