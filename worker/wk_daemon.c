#include "wk_daemon.h"

#include "ib_log.h"

int wk_daemon_run(const wk_config_t *cfg)
{
    (void)cfg;
    IB_LOG(IB_LOG_ERROR, "start", IB_MSG("the message pipeline is not built yet"));
    return 1;
}
