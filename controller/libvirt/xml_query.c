/* XPath questions to libvirt's XML documents (xml_query.h). */
#include "xml_query.h"

#include <stdlib.h>
#include <string.h>

int xml_query_open(struct xml_query *q, const char *xml)
{
    q->doc = xml ? xmlReadMemory(xml, (int)strlen(xml), "libvirt.xml", NULL,
                                 XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING)
                 : NULL;
    q->ctx = q->doc ? xmlXPathNewContext(q->doc) : NULL;
    return q->ctx ? 0 : -1;
}

void xml_query_close(struct xml_query *q)
{
    xmlXPathFreeContext(q->ctx);
    xmlFreeDoc(q->doc);
    q->ctx = NULL;
    q->doc = NULL;
}

char *xml_query_string(const struct xml_query *q, const char *expr)
{
    if (!q->ctx)
        return NULL;
    xmlXPathObjectPtr o = xmlXPathEvalExpression(BAD_CAST expr, q->ctx);
    char *s =
        o && o->type == XPATH_STRING && o->stringval ? strdup((const char *)o->stringval) : NULL;
    xmlXPathFreeObject(o);
    return s;
}

bool xml_query_true(const struct xml_query *q, const char *expr)
{
    if (!q->ctx)
        return false;
    xmlXPathObjectPtr o = xmlXPathEvalExpression(BAD_CAST expr, q->ctx);
    bool yes = o && o->type == XPATH_BOOLEAN && o->boolval;
    xmlXPathFreeObject(o);
    return yes;
}
