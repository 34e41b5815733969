/*
 * Fuzz target: the AMQP message decoder of amqp/ (sb_msg_decode). Any input
 * must decode or set decode_err; never crash, leak or read out of bounds.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "sb_msg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sb_msg_t msg;
    unsigned char uuid[16];
    char text[37];

    sb_msg_decode(&msg, data, size, true);
    if (msg.decode_err.code == IB_E_OK) {
        /* Walk what was decoded so sanitizers see every byte. */
        size_t n = 0;
        for (size_t k = 0; k < msg.nprops; k++) {
            n += strlen(msg.props[k].key);
            if (msg.props[k].str)
                n += strlen(msg.props[k].str);
        }
        if (msg.body_len)
            n += msg.body[msg.body_len - 1];
        (void)sb_msg_prop(&msg, "DeadLetterReason");
        (void)n;
    }
    sb_msg_clear(&msg);
    sb_msg_decode(&msg, data, size, false);
    sb_msg_clear(&msg);
    if (sb_lock_token_from_tag(data, size < 16 ? size : 16, uuid, text))
        (void)sb_guid_parse(text, uuid);
    return 0;
}
