/* main.c — the `cmf` command line: dispatches to one file per subcommand. */
#include <stdio.h>
#include <string.h>

#include "cmf.h"

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        printf("cmf %s\nusage: cmf <command> [options]\n", CMF_VERSION_STRING);
        return argc < 2 ? 1 : 0;
    }
    fprintf(stderr, "cmf: unknown command '%s'\n", argv[1]);
    return 1;
}
