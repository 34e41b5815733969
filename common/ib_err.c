#include "ib_err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const err_names[] = {
#define IB_ERR_NAME_(name, desc) "IB_E_" #name,
    IB_ERR_MAP(IB_ERR_NAME_)
#undef IB_ERR_NAME_
};

static const char *const err_descs[] = {
#define IB_ERR_DESC_(name, desc) desc,
    IB_ERR_MAP(IB_ERR_DESC_)
#undef IB_ERR_DESC_
};

const char *ib_err_name(ib_err_t code)
{
    if ((unsigned)code >= IB_E__COUNT)
        return "IB_E_UNKNOWN";
    return err_names[code];
}

const char *ib_err_str(ib_err_t code)
{
    if ((unsigned)code >= IB_E__COUNT)
        return "unknown error";
    return err_descs[code];
}

const char *ib_class_name(ib_class_t cls)
{
    switch (cls) {
    case IB_CLASS_TRANSIENT:
        return "transient";
    case IB_CLASS_PERMANENT:
        return "permanent";
    case IB_CLASS_DUPLICATE:
        return "duplicate";
    case IB_CLASS_AMBIGUOUS:
        return "ambiguous";
    default:
        return "none";
    }
}

void ib_error_clear(ib_error_t *err)
{
    if (err)
        memset(err, 0, sizeof(*err));
}

ib_err_t ib_error_set(ib_error_t *err, ib_err_t code, ib_class_t cls, const char *fmt, ...)
{
    if (!err)
        return code;
    memset(err, 0, sizeof(*err));
    err->code = code;
    err->cls = cls;
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->text, sizeof(err->text), fmt, ap);
        va_end(ap);
    } else {
        ib_strlcpy(err->text, ib_err_str(code), sizeof(err->text));
    }
    return code;
}

void ib_error_prefix(ib_error_t *err, const char *fmt, ...)
{
    char head[256], old[sizeof(err->text)];
    va_list ap;

    if (!err)
        return;
    va_start(ap, fmt);
    vsnprintf(head, sizeof(head), fmt, ap);
    va_end(ap);
    memcpy(old, err->text, sizeof(old));
    snprintf(err->text, sizeof(err->text), "%s: %s", head, old);
}

size_t ib_strlcpy(char *dst, const char *src, size_t size)
{
    size_t n = strlen(src);
    if (size) {
        size_t c = n < size - 1 ? n : size - 1;
        memcpy(dst, src, c);
        dst[c] = '\0';
    }
    return n;
}
