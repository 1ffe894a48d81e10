/* ops.c — the op table's metadata, expanded from ops.def: names, kinds,
 * arities, shape and dtype rules, Python signatures and torch callables. */
#include "graph.h"

#include <strings.h>

static const WkOpInfo op_infos[WK_NOPS] = {
#undef WK_OP
#define WK_OP(name, kind, arity, shape, dtype, sig, torch) \
    {#name, WK_KIND_##kind, arity, WK_SHAPE_##shape, WK_DTR_##dtype, sig, torch},
#include "ops.def"
#undef WK_OP
};

/* WK_OP_EXTERN is outside the table (no lowering, no torch names); its
 * pseudo-row lets printers and the Graph handle treat every node alike. */
static const WkOpInfo extern_info = {"EXTERN", WK_KIND_EXTERN, -1, WK_SHAPE_SCALAR, WK_DTR_ATTR, "", ""};

const WkOpInfo *wk_op_info(WkOp op) {
    if (op == WK_OP_EXTERN) return &extern_info;
    return (unsigned)op < (unsigned)WK_NOPS ? &op_infos[op] : NULL;
}

int wk_op_from_name(const char *name) {
    if (!name) return -1;
    for (int i = 0; i < WK_NOPS; i++)
        if (strcasecmp(op_infos[i].name, name) == 0) return i;
    return -1;
}
