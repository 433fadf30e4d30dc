/* libFuzzer target for the agent's own parser: the lines it takes from the controller
 * (agent_msg_parse) and the config it builds a runner launch from (launch_prepare). The
 * agent is compiled in whole, its main renamed, so its static functions are the ones
 * fuzzed. Inside a guest the controller is trusted, but a line can be cut or corrupted
 * on its way, and the agent must refuse it cleanly. */
#define main hatchery_agent_main
#include "../../agent/hatchery-agent.c"
#undef main

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *msg = NULL;
    enum agent_msg_type type;
    char err[256];
    if (agent_msg_parse((const char *)data, size, &msg, &type, err, sizeof(err)) < 0)
        return 0;
    if (type == AGENT_MSG_CONFIG) {
        struct launch l;
        if (launch_prepare(msg, NULL, &l) == 0) {
            if (!l.argv[0] || !l.jit || strlen(l.jit) != l.jit_len)
                abort();
            launch_free(&l);
        }
    }
    json_decref(msg);
    return 0;
}
