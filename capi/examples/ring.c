/* ring.c: fm from C. A token goes round the ring of ranks LAPS times,
 * forwarded from inside its handler; each rank also streams a message of
 * BIG bytes to the next rank, which reads it in pieces and checks every
 * byte. Build: cc ring.c -Ipath/to/capi/include -lfm_c (or pkg-config fm);
 * run: fmrun -n 4 ./ring */
#include "fm.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { TOKEN = 1, BIG_MESSAGE = 2, LAPS = 3, BIG = 100000, PIECE = 1000 };

static unsigned tokens_seen, big_ok;
static uint64_t last_token;

static unsigned next(void) { return (FM_nodeid() + 1) % FM_numnodes(); }

static unsigned char pattern(unsigned src, size_t i) {
    return (unsigned char)(i * 7 + src * 13);
}

/* The token: read it in two pieces, count it, pass it on (from here). */
static int on_token(FM_stream *s, unsigned sender, void *ctx) {
    (void)sender;
    (void)ctx;
    uint32_t half[2];
    if (FM_receive(&half[0], s, 4) != 4 || FM_receive(&half[1], s, 4) != 4)
        return -1;
    uint64_t hops;
    memcpy(&hops, half, 8);
    tokens_seen++;
    last_token = hops;
    if (hops + 1 < (uint64_t)LAPS * FM_numnodes()) {
        hops++;
        if (FM_send(next(), TOKEN, &hops, sizeof hops) != FM_OK)
            return -1;
    }
    return FM_OK;
}

/* A big message, read in pieces and checked byte by byte. */
static int on_big(FM_stream *s, unsigned sender, void *ctx) {
    unsigned char buf[PIECE];
    size_t at = 0;
    long n;
    (void)ctx;
    while ((n = FM_receive(buf, s, sizeof buf)) > 0) {
        for (long i = 0; i < n; i++)
            if (buf[i] != pattern(sender, at + (size_t)i)) {
                fprintf(stderr, "byte %zu from %u is wrong\n", at + (size_t)i, sender);
                return -1;
            }
        at += (size_t)n;
    }
    if (n < 0 || at != BIG)
        return -1;
    big_ok++;
    return FM_OK;
}

static void check(int ok, const char *what) {
    if (!ok) {
        fprintf(stderr, "ring: %s: %s\n", what, FM_last_error());
        exit(1);
    }
}

int main(void) {
    check(FM_set_handler(TOKEN, "token", on_token, NULL) == FM_OK, "FM_set_handler");
    check(FM_set_handler(BIG_MESSAGE, "big", on_big, NULL) == FM_OK, "FM_set_handler");
    check(FM_initialize() == FM_OK, "FM_initialize");
    unsigned me = FM_nodeid(), n = FM_numnodes();

    static unsigned char big[BIG];
    for (size_t i = 0; i < BIG; i++)
        big[i] = pattern(me, i);
#ifdef SABOTAGE
    big[BIG / 2] ^= 1; /* the receiver's check must catch this */
#endif
    FM_stream *s = FM_begin_message(next(), BIG, BIG_MESSAGE);
    check(s != NULL, "FM_begin_message");
    for (size_t at = 0; at < BIG; at += 30000) {
        size_t len = BIG - at < 30000 ? BIG - at : 30000;
        check(FM_send_piece(s, big + at, len) == FM_OK, "FM_send_piece");
    }
    check(FM_end_message(s) == FM_OK, "FM_end_message");

    if (me == 0) {
        uint64_t hops = 0;
        check(FM_send(next(), TOKEN, &hops, sizeof hops) == FM_OK, "FM_send");
    }
    while (tokens_seen < LAPS || big_ok < 1)
        check(FM_extract_wait((size_t)-1) >= 0, "FM_extract_wait");
    check(FM_barrier() == FM_OK, "FM_barrier");
    printf("rank %u of %u: token seen %u times, last hop %llu; big message checked\n",
           me, n, tokens_seen, (unsigned long long)last_token);
    check(FM_finalize() == FM_OK, "FM_finalize");
    return 0;
}
