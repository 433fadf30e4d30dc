/* Hatchery's version, for hatcheryd (`--version`, /healthz, hatchery_build_info) and the
 * CLI (`hatchery --version`). */
#ifndef HATCHERY_VERSION_H
#define HATCHERY_VERSION_H

#define HATCHERY_VERSION "0.1.0"

#endif
