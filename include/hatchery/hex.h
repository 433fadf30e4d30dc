/* Hex digits, shared by hatcheryd (the webhook signature) and the agent (the restore seed):
 * each decodes its own fixed-length string digit by digit, strictly. */
#ifndef HATCHERY_HEX_H
#define HATCHERY_HEX_H

/* 0 to 15 for a hex digit, -1 for anything else (sscanf's %x would take signs and spaces
 * too, and bring glibc's scanf and float parsers into the static agent). */
static inline int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

#endif
