/* convert.c — `cmf convert <hf-dir|file.gguf> -o out.cmf [--quant ...]`: thin over cmf_convert_hf /
 * cmf_convert_gguf (src/convert/convert.h). The output is written under a temporary name and renamed by the
 * writer, so a failed conversion never leaves a partial file. */
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cli.h"
#include "convert/convert.h"
#include "format/format.h"
#include "model/model.h"
#include "model/o1.h"
#include "quant/dtype.h"
#include "util/fileio.h"

static const char *USAGE =
    "usage: cmf convert SOURCE -o OUT.cmf [--quant f32|f16|bf16|q8|q8_2f|q4|q4t|q4tp|q2tp] [--no-progress]\n"
    "                   [--o1 all|deepN|i,j,k [--o1-m M] [--o1-window W] [--o1-sink S]]\n"
    "\n"
    "SOURCE is a Hugging Face model directory (config.json, *.safetensors, tokenizer.json, ...) or a GGUF file.\n"
    "\n"
    "  -o, --output FILE   the CMF file to write (required; a path, not '-': the writer seeks back to the header)\n"
    "  --quant Q           dtype of the 2-D weight matrices: f32, f16, bf16, q8 (= q8_row: int8 per row with an\n"
    "                      f16 scale), q8_2f (int8 with row and column scales), q4 (q4_block), q4t (q4_tiled),\n"
    "                      q4tp (4-bit with a per-row log-scale ladder) or q2tp (a profile: 2-bit gate/up, q4tp\n"
    "                      elsewhere). 1-D and small tensors are stored f16 (f32/bf16 when that is the target);\n"
    "                      q4t/q4tp/q2tp fall back to q8_2f for matrices whose columns are not a multiple of 32\n"
    "                      (CMF_FORMAT.md §2.0, in the shared folder's spec/, not in this repository).\n"
    "                      Default: f16 for Hugging Face sources; for GGUF sources f32, with Q4_0 kept as\n"
    "                      q4t (lossless), Q8_0 as f16 and Q4_1/Q5_x/K-quants (Q4_K_M, ...)/IQ4_NL/IQ4_XS\n"
    "                      re-encoded as q8 (f32 keeps their exact values, q4tp a smaller, lossier file;\n"
    "                      see README).\n"
    "  --o1 SPEC           write the O(1) far-field hint provenance.o1_attn: the runtime then runs these\n"
    "                      full-attention layers with the far field unless --o1 or CMF_O1 says otherwise\n"
    "                      (all, the N deepest (deepN) or listed layers; off = no hint). Weights are unchanged\n"
    "  --o1-m M, --o1-window W, --o1-sink S\n"
    "                      the hint's landmarks (default 32, 4..1024), exact window (128) and sinks (4)\n"
    "  --no-progress       no progress bar (by default one is drawn on stderr, when stderr is a terminal and\n"
    "                      the conversion takes more than a second)\n"
    "\n"
    "Environment: CMF_Q4_SEARCH=0 (or off/false/no) writes q4/q4t/q4tp with cortiq's encoders, byte-identical to\n"
    "the reference converter (default: each block's scale searched for the least squared error, same format);\n"
    "CMF_QUANT_THREADS=N encoder threads (default: all CPUs; the bytes do not depend on it); CMF_Q2TP_SEARCH=0\n"
    "turns off the q4tp/q2tp scale-code search.\n"
    "\n"
    "Warnings go to stderr, prefixed \"cmf convert: warning:\".\n";

static void on_warn(void *ctx, const char *msg) {
    (void)ctx;
    cli_warn("convert", "%s", msg);
}

/* The progress bar: drawn on stderr (a terminal only) once the conversion has run for more than a second,
 * redrawn in place at most ten times a second, ended with a newline by the final call (done == total). */
typedef struct progress_state {
    int drawn;
    double last;
} progress_state;

static void on_progress(void *ctx, uint64_t done, uint64_t total, double elapsed_s, const char *tensor) {
    progress_state *p = ctx;
    int final = done >= total;
    if (elapsed_s <= 1.0 && !p->drawn) return;
    if (!final && p->drawn && elapsed_s - p->last < 0.1) return;
    p->last = elapsed_s;
    enum { WIDTH = 30 };
    double frac = total ? (double)done / (double)total : 1.0;
    if (frac > 1.0) frac = 1.0;
    char bar[WIDTH + 1];
    int fill = (int)(frac * WIDTH);
    for (int i = 0; i < WIDTH; i++) bar[i] = i < fill ? '#' : '.';
    bar[WIDTH] = '\0';
    fprintf(stderr, "\rconverting [%s] %3d%% %6.0f/%.0f MiB %5.1f s  %-40.40s", bar, (int)(frac * 100.0),
            (double)done / 1048576.0, (double)total / 1048576.0, elapsed_s, final ? "done" : (tensor ? tensor : ""));
    p->drawn = 1;
    if (final) fputc('\n', stderr);
    fflush(stderr);
}

/* A GGUF file starts with the bytes "GGUF". */
static int is_gguf(const char *path) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return 0;
    char magic[4] = {0};
    size_t n = fread(magic, 1, 4, fp);
    fclose(fp);
    return n == 4 && !memcmp(magic, "GGUF", 4);
}

int cmd_convert(int argc, char **argv) {
    cli_args a;
    cli_args_init(&a, "convert", argc, argv);
    const char *src = NULL, *out = NULL, *quant = NULL;
    const char *o1 = NULL;
    long o1_m = 0, o1_window = 0, o1_sink = -1;
    int progress = 1, rc;
    while (cli_args_next(&a)) {
        if (cli_is(&a, "--help", "-h")) {
            fputs(USAGE, stdout);
            return CLI_OK;
        }
        if (cli_is(&a, "--output", "-o")) {
            if ((rc = cli_value(&a, &out))) return rc;
        } else if (cli_is(&a, "--quant", "-q")) {
            if ((rc = cli_value(&a, &quant))) return rc;
        } else if (cli_is(&a, "--o1", NULL)) {
            if ((rc = cli_value(&a, &o1))) return rc;
        } else if (cli_is(&a, "--o1-m", NULL)) {
            if ((rc = cli_int(&a, 4, 1024, &o1_m))) return rc;
        } else if (cli_is(&a, "--o1-window", NULL)) {
            if ((rc = cli_int(&a, 1, 1 << 24, &o1_window))) return rc;
        } else if (cli_is(&a, "--o1-sink", NULL)) {
            if ((rc = cli_int(&a, 0, 1 << 20, &o1_sink))) return rc;
        } else if (cli_is(&a, "--no-progress", NULL)) {
            progress = 0;
        } else if (!cli_is_flag(&a) && !src) {
            src = a.arg;
        } else {
            return cli_unknown(&a);
        }
    }
    if (!src) return cli_usage_error("convert", "missing SOURCE (a Hugging Face directory or a .gguf file)");
    if (!out) return cli_usage_error("convert", "missing -o OUT.cmf");
    if (!*out) return cli_usage_error("convert", "-o needs a file name (got an empty string)");
    if (!strcmp(out, "-")) /* the writer seeks back to fill in the envelope and directory (CMF_FORMAT.md §1) */
        return cli_usage_error("convert", "-o - (stdout) is not supported: a CMF file is written with seeks back to "
                                          "its header, so it needs a regular file; give a path");
    if (!o1 && (o1_m || o1_window || o1_sink >= 0))
        return cli_usage_error("convert", "--o1-m, --o1-window and --o1-sink need --o1 SPEC");
    if (o1) { /* the spec's form now (layer numbers are checked against the model when the header is written) */
        static uint8_t on[CMF_MAX_LAYERS];
        if (cmf_o1_parse_layers(o1, CMF_MAX_LAYERS, NULL, on) < 0)
            return cli_usage_error("convert", "invalid value '%s' for --o1 (expected all, deepN with N >= 1, off or a "
                                              "layer list i,j,k)", o1);
    }

    /* fail before any work when the output's folder does not exist */
    const char *slash = strrchr(out, '/');
    if (slash && slash != out) {
        char dir[4096];
        size_t dl = (size_t)(slash - out);
        if (dl < sizeof dir) {
            memcpy(dir, out, dl);
            dir[dl] = '\0';
            if (!cmf_is_dir(dir)) return cli_fail("convert", "-o %s: the folder %s does not exist", out, dir);
        }
    }

    if (cmf_same_file(src, out))
        return cli_fail("convert", "-o %s is the source itself; write the CMF file under another name", out);
    cmf_status chk = cmf_check_output_path(out);
    if (chk != CMF_OK) return cli_lib_error("convert", chk);

    int dtype = -1;
    if (quant) {
        dtype = cmf_dtype_from_name(quant);
        if (dtype != CMF_DT_F32 && dtype != CMF_DT_F16 && dtype != CMF_DT_BF16 && dtype != CMF_DT_Q8_ROW &&
            dtype != CMF_DT_Q8_2F && dtype != CMF_DT_Q4_BLOCK && dtype != CMF_DT_Q4_TILED && dtype != CMF_DT_Q4TP &&
            dtype != CMF_DT_Q2TP)
            return cli_usage_error("convert",
                                   "invalid value '%s' for --quant (expected f32, f16, bf16, q8, q8_2f, q4, q4t, q4tp "
                                   "or q2tp)", quant);
    }

    cmf_convert_opts opts;
    memset(&opts, 0, sizeof opts);
    progress_state ps = {0, 0.0};
    opts.progress = progress && isatty(STDERR_FILENO);
    opts.on_progress = on_progress;
    opts.progress_ctx = &ps;
    opts.warn = on_warn;
    opts.warn_ctx = NULL;
    opts.o1 = o1;
    opts.o1_m = (int)o1_m;
    opts.o1_window = (int)o1_window;
    opts.o1_sink = o1_sink >= 0 ? (int)o1_sink : 0;
    opts.o1_sink_set = o1_sink >= 0;

    cmf_status st;
    double t0 = cli_now();
    if (cmf_is_file(src)) { /* a GGUF named OUT.tmp / OUT.blob.tmp: refused before the handler could remove it */
        cmf_status c = cmf_writer_check_source(out, src, "conversion");
        if (c != CMF_OK) return cli_lib_error("convert", c);
    }
    cli_remove_temps_on_signal(out); /* Ctrl-C leaves no OUT.tmp / OUT.blob.tmp behind */
    if (cmf_is_dir(src)) {
        opts.quant = dtype >= 0 ? dtype : CMF_DT_F16;
        st = cmf_convert_hf(src, out, &opts);
    } else if (cmf_is_file(src)) {
        if (!is_gguf(src))
            return cli_fail("convert", "%s: not a GGUF file (no \"GGUF\" magic) and not a Hugging Face directory",
                            src);
        opts.quant = dtype >= 0 ? dtype : CMF_DT_F32;
        opts.quant_auto = dtype < 0;
        st = cmf_convert_gguf(src, out, &opts);
    } else if (access(src, F_OK) == 0) {
        return cli_fail("convert", "%s: not a regular file or directory", src);
    } else {
        return cli_fail("convert", "%s: no such file or directory", src);
    }
    if (st != CMF_OK) return cli_write_error("convert", out, st);
    /* a CMF file under a .gguf name would be taken for a GGUF by llama.cpp and by people: say so, without renaming
     * it (llama.cpp's tools write where they are told too; review13); only once it is written */
    size_t out_len = strlen(out);
    if (out_len >= 5 && !strcasecmp(out + out_len - 5, ".gguf"))
        cli_warn("convert", "-o %s: the output is a CMF file, not GGUF, despite its name (llama.cpp cannot read it); "
                            "a .cmf name avoids the confusion", out);
    /* what was written: "--quant Q" as the user gave it (the header's quant_type has no value for q4t / q4tp / q2tp:
     * it says Q4_BLOCK for them), else "quant_type" and the header's value (a GGUF's quantized tensors keep their own
     * type); then each dtype of the file's directory with its tensor count, the most bytes first, so what a request
     * became is plain (a GGUF's Q4_0 is q4_tiled also under --quant q4: "--quant q4: q4_tiled x169, ...") */
    char what[256] = "";
    cmf_file *f = NULL;
    if (cmf_file_open(out, &f) == CMF_OK) {
        const cJSON *qt = cJSON_GetObjectItemCaseSensitive(f->header, "quant_type");
        if (dtype >= 0) snprintf(what, sizeof what, "--quant %.40s:", quant);
        else snprintf(what, sizeof what, "quant_type %.40s:", cJSON_IsString(qt) ? qt->valuestring : cmf_dtype_name(opts.quant));
        size_t count[CMF_DT_COUNT + 1];
        uint64_t bytes[CMF_DT_COUNT + 1];
        cli_dtype_tally(f, count, bytes);
        for (;;) {
            int best = -1;
            for (int d = 0; d < CMF_DT_COUNT; d++)
                if (count[d] && (best < 0 || bytes[d] > bytes[best])) best = d;
            if (best < 0) break;
            size_t n = strlen(what);
            snprintf(what + n, sizeof what - n, "%s%s x%zu", what[n - 1] == ':' ? " " : ", ",
                     cmf_dtype_name(best) ? cmf_dtype_name(best) : "?", count[best]);
            count[best] = 0;
        }
        cmf_file_close(f);
    }
    fprintf(stderr, "cmf convert: wrote %s (%s) in %.1f s\n", out, what[0] ? what : cmf_dtype_name(opts.quant),
            cli_now() - t0);
    return CLI_OK;
}
