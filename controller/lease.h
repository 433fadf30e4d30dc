/* The leader's lease: which of the hatcheryd instances sharing one PostgreSQL store (the
 * same controller_id) schedules, reconciles, talks to GitHub about runners and acts on
 * libvirt.
 *
 * One row per controller_id in the table `leases` (holder, epoch, expires_ms), written by
 * one statement that renews the lease for its holder or takes it over once it has expired,
 * both judged by the database's clock alone; each takeover adds one to the epoch. Every
 * instance runs that statement every lease/5 on a connection of its own, off the loop.
 *
 * The holder fences itself by its own clock: the lease it renewed is good until the time it
 * *sent* the renewal plus 4/5 of the lease (CLOCK_BOOTTIME, which a paused process or a
 * suspended machine does not stop), which ends before the database's expiry (the renewal
 * reached the database after it was sent) and so before any other instance may take over.
 * Past that moment, or when a renewal answers with another epoch, it acts no more:
 * lease_fence_check(), asked before every libvirt and GitHub call, ends the process (exit
 * status LEASE_LOST_EXIT), and so does a timer on the loop for an idle one. systemd starts it
 * again, as a follower; its guests are the new leader's to adopt, as after any restart. A
 * paused leader (SIGSTOP keeps its TCP connections) therefore makes no call once it is
 * continued: it finds its time gone first.
 *
 * The store refuses a leader's write once a newer epoch exists (store_fence_set), as the
 * second fence; a domain records the epoch that made it. */
#ifndef HATCHERY_LEASE_H
#define HATCHERY_LEASE_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

struct store_conn;
struct lease;

/* EX_TEMPFAIL: the process ended because it no longer leads; starting it again is right. */
#define LEASE_LOST_EXIT 75

struct lease_options {
    const char *controller_id;
    const char *instance; /* this process, as `hatchery leader` shows it */
    int64_t lease_ms;
};

/* `on_leading` runs on the loop once, when this instance first holds the lease, with its
 * epoch. */
struct lease_events {
    void (*on_leading)(void *data, int64_t epoch);
    void *data;
};

/* Starts renewing (the first attempt at once) over `conn`, which it takes over. */
int lease_start(uv_loop_t *loop, struct store_conn *conn, const struct lease_options *options,
                const struct lease_events *events, struct lease **ret);
/* At a clean stop, once nothing acts any more: gives the lease up (its expiry set to now,
 * so that a follower takes over at its next attempt, not a lease later), synchronously,
 * and frees it. NULL is ignored. */
void lease_release(struct lease *lease);

struct lease_stats {
    bool leading;
    int64_t epoch;            /* the epoch this instance leads at, or 0 */
    int64_t leading_since_ms; /* wall clock, 0 when following */
    uint64_t renewals;        /* attempts answered, taken or not */
    uint64_t renewal_failures;
    uint64_t slow_renewals; /* answered (or failed) after more than lease/5 */
    uint64_t takeovers;     /* times this instance took the lease */
    int64_t last_renewal_ms;
};
void lease_stats_get(const struct lease *lease, struct lease_stats *ret);

/* What the store says of `controller_id`'s lease, for `hatchery leader` (any instance, a
 * follower too): one row per instance that renewed in the last hour, {instance, started_ms,
 * renewed_ms, epoch (its own: 0 for a follower), holder, lease_epoch, acquired_ms,
 * expires_ms, now_ms (the database's clock)}. store_read's contract. */
struct store;
int lease_read(struct store *store, const void *owner, const char *controller_id,
               void (*cb)(void *data, json_t *rows), void *data);

/* Before a libvirt or GitHub call, from any thread: 0 when this process may act (it holds
 * a lease still good by its own clock, or it runs without one: a SQLite store); -EPERM for
 * a follower, which must not. A leader whose time is up does not return: the process ends
 * with LEASE_LOST_EXIT, naming `what`. */
int lease_fence_check(const char *what);
/* The same where a refusal cannot be answered (a libvirt call on a host's thread): a
 * follower's call is a defect, and ends the process as a lost lease does. */
void lease_fence_or_exit(const char *what);
/* The epoch this process leads at (0: none, or no lease), for what it records of its acts:
 * the domains it defines. Any thread. */
int64_t lease_epoch(void);

#endif
