/* Built and run inside the guest by the stand-in job: proves that a compiler ran in a
 * container build step and that the result runs, on the guest's own architecture. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/utsname.h>

int main(int argc, char **argv)
{
    struct utsname u;
    uname(&u);
    uint16_t probe = 1;
    const char *order = *(uint8_t *)&probe ? "little-endian" : "big-endian";
    if (argc > 1 && strcmp(argv[1], "--check") == 0)
        return u.machine[0] ? 0 : 1;
    printf("hatchery-hello: built in a container on %s (%s)\n", u.machine, order);
    return 0;
}
