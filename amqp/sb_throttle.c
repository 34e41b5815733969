/*
 * sb_throttle.c - com.microsoft:server-busy: the broker is throttling the
 * namespace. Any operation answered busy (a receive link's detach, a
 * settlement's rejection, a send's rejection, a $management 503) puts the
 * whole client on hold until a jittered wait ends: no credit, no attach,
 * no settlement, no send; renewals go on (a lock must not lapse for it).
 * Nothing is dead-lettered or abandoned for it: a refused settlement waits
 * in the settle queue and goes out through $management when the hold ends
 * (a session message's cannot: its session is given back and the message
 * comes again, sb_settle.c); session receivers accept, drain and hand out
 * nothing while holding, and take sessions again when it ends.
 * The waits grow with the busy answers in a row (full jitter,
 * SB_BUSY_BASE_MS doubling up to SB_BUSY_MAX_MS), so full speed returns
 * within SB_BUSY_MAX_MS of the broker accepting again.
 *
 * thread: proactor.
 */
#include <string.h>

#include "ib_log.h"
#include "sb_client_int.h"

/* A busy answer this long after the last hold ended starts the steps again. */
#define SB_BUSY_CALM_MS 30000

bool sb_throttle_on(const sb_client_t *c)
{
    return !c->stopping && c->busy_until > ib_mono_ms();
}

void sb_throttle_note(sb_client_t *c, const char *what)
{
    long long now = ib_mono_ms(), wait;
    if (c->stopping)
        return;
    c->stats.server_busy++;
    if (c->busy_until > now)
        return; /* already holding: the answers of one hold are one step */
    if (now - c->busy_ended > SB_BUSY_CALM_MS)
        c->busy_streak = 0;
    c->busy_streak++;
    wait = ib_backoff_ms(SB_BUSY_BASE_MS, SB_BUSY_MAX_MS, (int)c->busy_streak, &c->seed);
    if (wait < SB_BUSY_MIN_MS)
        wait = SB_BUSY_MIN_MS;
    c->busy_until = now + wait;
    if (!c->busy_since) {
        c->busy_since = now;
        IB_LOG(IB_LOG_WARN, "server_busy", IB_MSG("the broker is throttling; holding"),
               IB_S("entity", c->entity), IB_S("operation", what));
    }
    IB_LOG(IB_LOG_DEBUG, "server_busy_wait", IB_S("operation", what), IB_I("wait_ms", wait),
           IB_I("step", c->busy_streak));
}

/* The hold is over: credit, attaches, the settle queue and the sends go on. */
static void resume(sb_client_t *c, long long now)
{
    c->stats.throttled_ms += (unsigned long long)(now - c->busy_since);
    IB_LOG(IB_LOG_INFO, "server_busy_end", IB_MSG("holding ended"), IB_S("entity", c->entity),
           IB_I("held_ms", now - c->busy_since));
    c->busy_since = 0;
    c->busy_ended = now;
    sb_settle_drain_queue(c);
    sb_client_take_sends(c);
    for (sb_rcv_t *r = c->rcvs; r; r = r->next) {
        if (r->retry_at > now)
            r->retry_at = now;
        sb_rcv_grant(r);
    }
    sb_session_fill(c); /* session receivers left idle by the hold attach again */
    sb_rcv_pump(c);
}

void sb_throttle_tick(sb_client_t *c)
{
    long long now = ib_mono_ms();
    if (c->busy_since && now >= c->busy_until)
        resume(c, now);
}

unsigned long long sb_throttle_ms(const sb_client_t *c)
{
    return c->stats.throttled_ms + (c->busy_since ? (unsigned long long)(ib_mono_ms() -
                                                                         c->busy_since)
                                                  : 0);
}
