/* The reconciler: recovery and adoption after a restart, orphan domains, volumes and
 * GitHub runners, queued jobs GitHub knows and the store does not, and phantom jobs whose
 * `completed` never came (scheduler.h says when each runs). reconcile.c owns struct
 * reconciler; it acts on runners only through runner.h. */
#ifndef HATCHERY_RECONCILE_H
#define HATCHERY_RECONCILE_H

#include <stdbool.h>

struct reconciler;
struct runner_group_checks;
struct runners;

/* A reconciler of the runners in `reg`, asking again about trusted pools' runner groups
 * in `groups`; NULL when out of memory. Neither is owned. */
struct reconciler *reconciler_new(struct runners *reg, struct runner_group_checks *groups);
void reconciler_free(struct reconciler *rec);
/* One pass: recovery, orphans, lost and phantom jobs. */
void reconcile_pass(struct reconciler *rec);
/* Records the store holds as live that no runner in memory owns: an earlier hatcheryd's.
 * Those in configured, idle, busy or finishing whose pool and host are still configured
 * are adopted; the rest are failed and their guests removed. */
void reconcile_recover(struct reconciler *rec);
/* Whether reconcile_recover ran: an earlier process's records are adopted or failed. */
bool reconcile_recovered(const struct reconciler *rec);
/* Queued jobs from a late or replayed delivery, asked about before any runner is made. */
void reconcile_verify_late_jobs(struct reconciler *rec);

#endif
