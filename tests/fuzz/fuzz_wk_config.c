/* Fuzz target: the JSON configuration loader and validator. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "ib_log.h"
#include "wk_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    FILE *fp, *devnull = fopen("/dev/null", "w");
    wk_config_t cfg;

    snprintf(path, sizeof(path), "/tmp/inboxd-fuzz-config-%d.json", (int)getpid());
    fp = fopen(path, "wb");
    if (!fp || !devnull)
        abort();
    fwrite(data, 1, size, fp);
    fclose(fp);
    wk_config_load(&cfg, path, devnull);
    json_decref(wk_config_to_json(&cfg));
    wk_config_free(&cfg);
    ib_log_clear_secrets();
    fclose(devnull);
    unlink(path);
    return 0;
}
