/* masks.c — `cmf masks MODEL.cmf [--task NAME]`: the task masks of a file (CMF_FORMAT.md §1.7, §3.4) and which
 * one a run activates (cmf_masks_choose), thin over src/skills/skills.h. */
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "skills/skills.h"

static const char *USAGE =
    "usage: cmf masks MODEL.cmf [--task NAME]\n"
    "\n"
    "Prints the default task, then each task mask: task_id, name, priority, sparsity, layers alive, active FFN\n"
    "neurons and attention heads (summed over the layers), quality (\"unmeasured\" when null), and which mask a\n"
    "run activates by default: the first mask of priority Fallback, else the first mask, unless the environment\n"
    "variable CMF_TASK=off (then none: dense).\n"
    "\n"
    "  --task NAME   also print which mask `--task NAME` would activate (\"off\" or \"none\": dense; an unknown\n"
    "                name keeps the default, with a warning)\n";

int cmd_masks(int argc, char **argv) {
    cli_args a;
    cli_args_init(&a, "masks", argc, argv);
    const char *path = NULL, *task = NULL;
    int rc;
    while (cli_args_next(&a)) {
        if (cli_is(&a, "--help", "-h")) {
            fputs(USAGE, stdout);
            return CLI_OK;
        }
        if (cli_is(&a, "--task", "-t")) {
            if ((rc = cli_value(&a, &task))) return rc;
            continue;
        }
        if (!cli_is_flag(&a) && !path) {
            path = a.arg;
            continue;
        }
        return cli_unknown(&a);
    }
    if (!path) return cli_usage_error("masks", "missing MODEL.cmf (see cmf masks --help)");
    cmf_file *f = NULL;
    cmf_status st = cmf_file_open(path, &f);
    if (st) return cli_lib_error("masks", st);
    cmf_masks *m = NULL;
    st = cmf_masks_load(f, &m);
    cmf_file_close(f);
    if (st) return cli_lib_error("masks", st);
    char *text = cmf_masks_describe(m);
    if (!text) {
        cmf_masks_free(m);
        return cli_fail("masks", "out of memory");
    }
    fputs(text, stdout);
    free(text);
    if (task) {
        int idx = -1;
        st = cmf_masks_choose(m, task, &idx);
        char msg[1024];
        if (st == CMF_E_NOT_FOUND)
            cli_warn("masks", "%s; keeping the default", cli_lib_message("masks", st, msg, sizeof msg));
        printf("--task %s activates: %s\n", task, idx >= 0 ? m->masks[idx].name : "none (dense)");
    }
    cmf_masks_free(m);
    return CLI_OK;
}
