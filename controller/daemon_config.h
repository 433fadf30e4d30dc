/* The config of a running hatcheryd: loaded and checked with its secret files, reloaded
 * (SIGHUP, `hatchery reload`), the GitHub client opened from it, and what the operator
 * should know about its pools' images. */
#ifndef HATCHERY_DAEMON_CONFIG_H
#define HATCHERY_DAEMON_CONFIG_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

#include "config.h"
#include "github.h"
#include "secret.h"

struct daemon;
struct store;

/* Opens the store the config names: PostgreSQL (database.postgresql, its password read
 * from database.password_file for the connections and wiped), or SQLite in state_dir.
 * `reach_only`: connect to PostgreSQL and close again, changing nothing (SQLite: 0). */
/* Whether this process leads: lead() has run (at once without a lease, a SQLite store;
 * with one, once it holds it). A follower connects to no host and calls no GitHub. */
bool daemon_leads(const struct daemon *d);
/* One connection of its own to database.postgresql (the lease's: lease.h), with the
 * password from its file. 0, or a negative errno with the reason in `err`. */
struct store_conn;
int daemon_database_connect(const struct config *c, struct store_conn **ret, char *err,
                            size_t err_size);
int daemon_store_open(uv_loop_t *loop, const struct config *c, bool reach_only,
                      struct store **ret_store, char *err, size_t err_size);

/* Loads and checks the config and its secret files. On failure every problem is in
 * `*ret_errors` (FILE:LINE: KEY: message lines; the caller frees). `check_github`
 * (--check-config) opens the App key or token too, and connects to a PostgreSQL store
 * (the start opens both later, after the HTTP front is forked; a reload keeps them). */
int daemon_config_load(const char *path, bool check_github, struct config **ret_config,
                       struct secret **ret_secret, char **ret_errors);

/* Re-reads the config; the answer is the admin command's (`how`: "SIGHUP", "admin"). */
json_t *daemon_reload(struct daemon *d, const char *how);

/* The runner scopes of config.github, as the GitHub client takes them (the strings are
 * the config's); the caller frees the array. */
struct github_scope *daemon_scopes_from_config(const struct config *c, size_t *ret_n);
int daemon_github_open(uv_loop_t *loop, const struct config *c, const struct github_scope *scopes,
                       struct github_client **ret, char *err, size_t err_size);

/* Logs what each VM pool's image says (its manifest, a runner below GitHub's floor), and
 * which pools' runners GitHub stops taking soon or has: at start, at a reload, and after
 * each fetch of GitHub's runner releases. */
void daemon_check_pool_images(struct daemon *d, const struct config *c);
void daemon_check_pool_runners(struct daemon *d, const struct config *c);

#endif
