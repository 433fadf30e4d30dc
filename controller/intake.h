/* What the HTTP front (front.h) hands the core: webhook deliveries, checked and parsed on
 * a worker, stored, passed to the scheduler and answered; /healthz; /metrics; and the
 * deliveries the front itself refused, counted and logged within bounds as the core's
 * own. `data` is the daemon (daemon.h). */
#ifndef HATCHERY_INTAKE_H
#define HATCHERY_INTAKE_H

#include "front.h"

void intake_request(void *data, struct front_call *call, enum front_route route,
                    const struct http_request *req);
void intake_rejected(void *data, const struct front_rejection *rej);

#endif
