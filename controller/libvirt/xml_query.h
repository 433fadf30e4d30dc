/* Questions to an XML document libvirt gave (capabilities, a network's definition), asked
 * with libxml2's XPath: one parse, then answers as strings or booleans. */
#ifndef HATCHERY_XML_QUERY_H
#define HATCHERY_XML_QUERY_H

#include <libxml/parser.h>
#include <libxml/xpath.h>
#include <stdbool.h>

struct xml_query {
    xmlDocPtr doc;
    xmlXPathContextPtr ctx;
};

/* Parses `xml` (NULL is no document) without the network, quietly: 0, or -1 when it is not
 * XML (the query is then empty and xml_query_close() is still called). */
int xml_query_open(struct xml_query *q, const char *xml);
void xml_query_close(struct xml_query *q);

/* The string value of `expr` (caller frees), or NULL when it is not a string. */
char *xml_query_string(const struct xml_query *q, const char *expr);

/* Whether `expr`, a boolean expression, is true (false on an empty query). */
bool xml_query_true(const struct xml_query *q, const char *expr);

#endif
