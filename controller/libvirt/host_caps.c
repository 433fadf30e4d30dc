/* A host's libvirt capabilities; see host_caps.h. */
#include "host_caps.h"

#include <errno.h>
#include <libxml/parser.h>
#include <libxml/xpath.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The XPath expression's value as a string (caller frees), or NULL. */
static char *xpath_string(xmlXPathContextPtr ctx, const char *expr)
{
    xmlXPathObjectPtr o = xmlXPathEvalExpression(BAD_CAST expr, ctx);
    char *s =
        o && o->type == XPATH_STRING && o->stringval ? strdup((const char *)o->stringval) : NULL;
    xmlXPathFreeObject(o);
    return s;
}

static bool xpath_true(xmlXPathContextPtr ctx, const char *expr)
{
    xmlXPathObjectPtr o = xmlXPathEvalExpression(BAD_CAST expr, ctx);
    bool yes = o && o->type == XPATH_BOOLEAN && o->boolval;
    xmlXPathFreeObject(o);
    return yes;
}

/* "+UID:+GID" (libvirt's DAC label) to UID, or -1. */
static long long label_uid(const char *label)
{
    if (!label || label[0] != '+')
        return -1;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(label + 1, &end, 10);
    return errno == 0 && end != label + 1 && *end == ':' && v >= 0 ? v : -1;
}

int host_caps_parse(const char *xml, struct host_caps *ret)
{
    memset(ret, 0, sizeof(*ret));
    ret->qemu_uid = -1;
    xmlDocPtr doc = xml ? xmlReadMemory(xml, (int)strlen(xml), "capabilities.xml", NULL,
                                        XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING)
                        : NULL;
    xmlXPathContextPtr ctx = doc ? xmlXPathNewContext(doc) : NULL;
    if (!ctx || !xpath_true(ctx, "boolean(/capabilities)")) {
        xmlXPathFreeContext(ctx);
        xmlFreeDoc(doc);
        return -EINVAL;
    }
    for (int a = 0; a < ARCH_MAX; a++) {
        char expr[160];
        snprintf(expr, sizeof(expr),
                 "boolean(/capabilities/guest/arch[@name='%s']/domain[@type='kvm'])",
                 pool_arch_names[a]);
        ret->kvm[a] = xpath_true(ctx, expr);
    }
    char *label = xpath_string(
        ctx, "string(/capabilities/host/secmodel[model='dac']/baselabel[@type='qemu'])");
    ret->qemu_uid = label_uid(label);
    free(label);
    xmlXPathFreeContext(ctx);
    xmlFreeDoc(doc);
    return 0;
}
