#include "sb_log.h"

#include <proton/logger.h>

#include "ib_log.h"

static void proton_sink(intptr_t ctx, pn_log_subsystem_t sub, pn_log_level_t sev, const char *msg)
{
    ib_log_level_t lvl = IB_LOG_DEBUG;
    (void)ctx;
    if (sev & (PN_LEVEL_CRITICAL | PN_LEVEL_ERROR))
        lvl = IB_LOG_ERROR;
    else if (sev & PN_LEVEL_WARNING)
        lvl = IB_LOG_WARN;
    else if (sev & PN_LEVEL_INFO)
        lvl = IB_LOG_INFO;
    IB_LOG(lvl, "proton", IB_MSG(msg), IB_S("subsystem", pn_logger_subsystem_name(sub)));
}

void sb_log_init(void)
{
    pn_logger_t *lg = pn_default_logger();
    pn_logger_set_log_sink(lg, proton_sink, 0);
    /* Warnings and errors always; Proton's chatty levels only when debugging. */
    pn_logger_set_mask(lg, PN_SUBSYSTEM_ALL,
                       ib_log_enabled(IB_LOG_DEBUG)
                           ? PN_LEVEL_INFO | PN_LEVEL_WARNING | PN_LEVEL_ERROR | PN_LEVEL_CRITICAL
                           : PN_LEVEL_WARNING | PN_LEVEL_ERROR | PN_LEVEL_CRITICAL);
}
