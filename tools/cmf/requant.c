/* requant.c — `cmf requant IN.cmf -o OUT.cmf --quant Q`: re-encodes the weight matrices of a CMF file under the
 * converter's per-tensor policy (CMF_FORMAT.md §2.0, §6.2) through cmf_requant (src/convert/requant.h). */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "convert/requant.h"
#include "format/format.h"
#include "quant/dtype.h"
#include "util/fileio.h"

static const char *USAGE =
    "usage: cmf requant IN.cmf -o OUT.cmf --quant Q\n"
    "\n"
    "Decodes each 2-D weight matrix and re-encodes it as Q under the converter's policy; norms, gates, byte\n"
    "blobs, the header (quant_type updated), the vocab and the masks are copied as they are.\n"
    "  -o, --output PATH   the file to write (written to PATH.tmp, then renamed; not IN.cmf itself)\n"
    "  -q, --quant Q       f32, f16, bf16, q8 (q8_row), q8_2f, q4 (q4_block), q4t (q4_tiled), q4tp, or q2tp\n"
    "                      (a profile: 2-bit MoE expert gate/up, or dense gate/up without experts; q4tp elsewhere).\n"
    "                      Matrices whose cols are not a multiple of 32 fall back to q8_2f for q4t/q4tp/q2tp.\n"
    "  CMF_Q2TP_SEARCH=0   turns off the q4tp/q2tp scale-code search (on by default)\n"
    "  CMF_Q4_SEARCH=0     (or off/false/no) q4/q4t/q4tp with cortiq's encoders, byte-identical to the reference\n"
    "                      converter (default: each block's scale searched for the least squared error)\n"
    "  CMF_QUANT_THREADS=N encoder threads (default: all CPUs; the bytes do not depend on it)\n";

int cmd_requant(int argc, char **argv) {
    cli_args a;
    cli_args_init(&a, "requant", argc, argv);
    const char *in = NULL, *out = NULL, *quant = NULL;
    int rc;
    while (cli_args_next(&a)) {
        if (cli_is(&a, "--help", "-h")) {
            fputs(USAGE, stdout);
            return CLI_OK;
        } else if (cli_is(&a, "--output", "-o")) {
            if ((rc = cli_value(&a, &out))) return rc;
        } else if (cli_is(&a, "--quant", "-q")) {
            if ((rc = cli_value(&a, &quant))) return rc;
        } else if (!cli_is_flag(&a) && !in) {
            in = a.arg;
        } else {
            return cli_unknown(&a);
        }
    }
    if (!in) return cli_usage_error("requant", "missing IN.cmf (see cmf requant --help)");
    if (!out) return cli_usage_error("requant", "missing -o OUT.cmf");
    if (!*out) return cli_usage_error("requant", "-o needs a file name (got an empty string)");
    if (!strcmp(out, "-")) /* as convert: the writer seeks back to its header */
        return cli_usage_error("requant", "-o - (stdout) is not supported: a CMF file is written with seeks back to "
                                          "its header, so it needs a regular file; give a path");
    if (!quant) return cli_usage_error("requant", "missing --quant");
    int dt = cmf_dtype_from_name(quant);
    if (dt != CMF_DT_F32 && dt != CMF_DT_F16 && dt != CMF_DT_BF16 && dt != CMF_DT_Q8_ROW && dt != CMF_DT_Q8_2F &&
        dt != CMF_DT_Q4_BLOCK && dt != CMF_DT_Q4_TILED && dt != CMF_DT_Q4TP && dt != CMF_DT_Q2TP)
        return cli_usage_error("requant", "invalid value '%s' for --quant (expected f32, f16, bf16, q8, q8_2f, q4, "
                                          "q4t, q4tp or q2tp)", quant);
    if (cmf_same_file(in, out)) /* as convert: never replace the input with a lossy re-encode of itself */
        return cli_fail("requant", "-o %s is the input itself; write the re-encoded file under another name", out);
    cmf_requant_stats stats;
    double t0 = cli_now();
    cmf_status chk = cmf_writer_check_source(out, in, "re-encoding"); /* before the handler may remove OUT.tmp */
    if (chk != CMF_OK) return cli_lib_error("requant", chk);
    cli_remove_temps_on_signal(out); /* Ctrl-C leaves no OUT.tmp / OUT.blob.tmp behind */
    cmf_status st = cmf_requant(in, out, dt, &stats);
    if (st != CMF_OK) return cli_write_error("requant", out, st);
    fprintf(stderr, "cmf requant: wrote %s (%s): %llu tensors re-encoded, %llu copied, %.1f s\n", out,
            cmf_dtype_name(dt), (unsigned long long)stats.reencoded, (unsigned long long)stats.copied,
            cli_now() - t0);
    return CLI_OK;
}
