/* verify.c — `cmf verify model.cmf`: recomputes every hash of the file (CMF_FORMAT.md §1.10–1.11) through
 * cmf_file_verify. Exit 0 and one "OK" line on stdout only when intact; otherwise each problem on its own line
 * on stderr and exit 1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "format/format.h"

static const char *USAGE =
    "usage: cmf verify MODEL.cmf\n"
    "\n"
    "Opens the file (envelope, header, directory, section bounds), then recomputes the header hash, the\n"
    "directory hash, the section hashes and every tensor's hash64.\n"
    "Prints \"OK: N tensors, header and directory hashes match\" and exits 0 when intact; otherwise prints each\n"
    "problem on stderr and exits 1. Non-zero bytes in the padding between sections or tensors, bytes after the\n"
    "last section and unhashed envelope fields that differ from what writers put (non-zero reserved flags, an\n"
    "absent section with a non-zero offset, required_features bits the content does not imply, header_off other\n"
    "than 128) are reported as warnings on stderr (the writer never leaves them; readers ignore them).\n";

int cmd_verify(int argc, char **argv) {
    cli_args a;
    cli_args_init(&a, "verify", argc, argv);
    const char *path = NULL;
    while (cli_args_next(&a)) {
        if (cli_is(&a, "--help", "-h")) {
            fputs(USAGE, stdout);
            return CLI_OK;
        }
        if (!cli_is_flag(&a) && !path) {
            path = a.arg;
            continue;
        }
        return cli_unknown(&a);
    }
    if (!path) return cli_usage_error("verify", "missing MODEL.cmf (see cmf verify --help)");

    cmf_file *f = NULL;
    cmf_status st = cmf_file_open(path, &f);
    if (st != CMF_OK) return cli_lib_error("verify", st);

    /* layout notes (non-zero padding, bytes after the last section) are warnings: the spec does not forbid them */
    char *notes = NULL;
    if (cmf_file_layout_notes(f, &notes) == CMF_OK) {
        for (char *line = notes; line && *line;) {
            char *nl = strchr(line, '\n');
            if (nl) *nl = '\0';
            if (*line) fprintf(stderr, "cmf verify: %s: warning: %s\n", path, line);
            line = nl ? nl + 1 : NULL;
        }
    }
    free(notes);
    char *report = NULL;
    st = cmf_file_verify(f, &report);
    int rc;
    if (st == CMF_OK) {
        printf("OK: %zu tensors, header and directory hashes match\n", f->n_tensors);
        rc = CLI_OK;
    } else if (report && *report) {
        /* one problem per line, each prefixed so that it reads on its own */
        char *line = report;
        while (line && *line) {
            char *nl = strchr(line, '\n');
            if (nl) *nl = '\0';
            if (*line) fprintf(stderr, "cmf verify: %s: %s\n", path, line);
            line = nl ? nl + 1 : NULL;
        }
        rc = CLI_FAIL;
    } else {
        rc = cli_lib_error("verify", st);
    }
    free(report);
    cmf_file_close(f);
    return rc;
}
