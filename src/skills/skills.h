/* skills.h — skills (overlay tensors `skill.<id>.<name>` and the header.skills registry) and task masks
 * (CMF_FORMAT.md §3, §1.7). Three parts:
 *
 *   resolve.c    which tensor a forward pass reads while a skill is active; the registry listing
 *   route.c      recon-argmin routing over given φ vectors (the skills' selection subspaces)
 *   masks.c      the masks section decoded into per-layer bitsets, and which mask is active
 *   bake.c       `skill add`: donor tensors that differ from the backbone, re-encoded, written as skill.<id>.*
 *   skillfile.c  standalone skill files (feature bit SKILL_FILE): export and apply
 *
 * Nothing here prints: warnings go to a caller-supplied callback, errors to cmf_err (cmf_last_error()).
 */
#ifndef CMF_SKILLS_H
#define CMF_SKILLS_H

#include <stddef.h>
#include <stdint.h>

#include "format/format.h"

/* ------------------------------------------------------------------------------------------------------------
 * Skills: resolution and registry (§3.1)
 * ---------------------------------------------------------------------------------------------------------- */

/* 1 if `id` is a valid skill id: 1-63 bytes of [A-Za-z0-9_-] (§3.1), and not "none" (which selects the backbone). */
int cmf_skill_id_valid(const char *id);

/* Checks that skill `id` can be activated on `f`: it must appear in header.skills (a record with that id) or as
 * a tensor-name prefix `skill.<id>.` (§3.1: a request for a skill that is in neither is an error). Also checks
 * every overlay tensor `skill.<id>.<N>` whose backbone tensor N exists: same ndim and shape (a replacement must
 * be shape-for-shape). Overlay tensors without a backbone tensor are allowed (they are never read, §3.1).
 * Errors: CMF_E_ARG (NULL argument or invalid id), CMF_E_NOT_FOUND (unknown id; the message lists the known
 * ids), CMF_E_FORMAT (shape mismatch; the message names the tensor and both shapes). */
cmf_status cmf_skill_exists(const cmf_file *f, const char *id);

/* The tensor a forward pass reads for backbone name `name` while skill `skill_id` is active (§3.1): the overlay
 * `skill.<skill_id>.<name>` when the directory has it, else the backbone tensor `name` itself. It is a
 * replacement, never an addition. Presence is decided on the backbone name: when `name` is absent this returns
 * NULL even if an overlay of that name exists (a skill can only replace tensors that exist). `skill_id` NULL or
 * "" means no skill (plain cmf_file_find). The id is not validated here: call cmf_skill_exists once first.
 * The returned pointer is owned by `f`. Returns NULL on allocation failure of a very long name as well. */
const cmf_tensor *cmf_skill_resolve(const cmf_file *f, const char *skill_id, const char *name);

/* One skill as `skill list` shows it (§3.2). Strings point into f->header and stay valid while `f` is open. */
typedef struct cmf_skill_info {
    const char *id;
    const char *name;            /* display name, NULL when absent */
    int registered;              /* 1: has a header.skills record; 0: known only from skill.<id>. tensors */
    size_t n_tensors;            /* directory entries named skill.<id>.* (all tensors for a standalone skill file) */
    uint64_t bytes;              /* their payload bytes */
    uint32_t *layers;            /* the record's `layers` (informational), malloc'd; NULL when none */
    size_t n_layers;
    int routable;                /* 1 when the record has a `selection` object (recon-argmin routing, §3.1) */
    const cJSON *quality;        /* the record's `quality`, NULL when absent or null ("not measured") */
    const char *input_mask_task; /* task mask activated with the skill, or NULL */
    const char *base_dir_hash;   /* standalone skill files only (§3.3), else NULL */
    char *id_storage;            /* internal: the id's storage when registered == 0 */
} cmf_skill_info;

/* Lists the skills of `f`: the header.skills records in order, then ids found only as `skill.<id>.` tensor
 * prefixes (sorted by first appearance in the directory). *out is malloc'd (NULL when *n == 0); free it with
 * cmf_skills_free. Errors: CMF_E_ARG, CMF_E_NOMEM, CMF_E_FORMAT (a record whose `layers` is not an array of
 * unsigned integers; the message names the record). */
cmf_status cmf_skills_list(const cmf_file *f, cmf_skill_info **out, size_t *n);
void cmf_skills_free(cmf_skill_info *list, size_t n);

/* ------------------------------------------------------------------------------------------------------------
 * Routing (§3.1 "Routing (recon-argmin)"; route.c). The caller runs the forward to get φ: the mean over the
 * prompt tokens of the hidden state after layers 0..=phi_layer, no final norm.
 * ---------------------------------------------------------------------------------------------------------- */

/* The decoded `selection` of one routable skill. */
typedef struct cmf_skill_selection {
    const char *id;      /* points into f->header */
    int unit;            /* metric "mse_unit": φ is L2-normalized first; "mse": as is */
    uint32_t phi_layer, rank, hidden;
    float *mean;         /* hidden values (from base64 of f16 LE) */
    float *basis;        /* rank rows of hidden values */
    int has_err_mean, has_err_std;
    double err_mean, err_std;
} cmf_skill_selection;

/* The selections of the skills that have one, in header.skills order. *out malloc'd (NULL when *n == 0); free
 * with cmf_skill_selections_free. Errors: CMF_E_FORMAT naming the skill (metric not mse/mse_unit, phi_layer or
 * rank missing, mean/basis not base64 of f16, value counts other than hidden_size and rank*hidden_size),
 * CMF_E_NOMEM, CMF_E_ARG. */
cmf_status cmf_skill_selections(const cmf_file *f, cmf_skill_selection **out, size_t *n);
void cmf_skill_selections_free(cmf_skill_selection *s, size_t n);

/* E_raw = ||r||^2 - sum_k (b_k . r)^2 with r = φ - mean (φ normalized first for mse_unit), clamped at 0, in
 * double precision (the reference accumulates in f32). `phi` holds s->hidden floats; *phi_sq (may be NULL)
 * receives ||φ||^2 of the (normalized) φ, the denominator of the displayed error. */
double cmf_skill_recon_error(const cmf_skill_selection *s, const float *phi, double *phi_sq);

typedef struct cmf_skill_route_score {
    size_t index;       /* into the selections array */
    double error;       /* displayed error E_raw / ||φ||^2 */
    double raw_error;   /* E_raw */
    double probability; /* softmax(-E_raw / T) with header.routing; 0 without */
} cmf_skill_route_score;

typedef struct cmf_skill_routing {
    cmf_skill_route_score *scores; /* best first (smallest E_raw) */
    size_t n;
    double confidence; /* the winner's probability (0 without calibration) */
    double margin;     /* 1/(1+E0) - 1/(1+E1) over raw errors (1/(1+E0) with one skill) */
    double novelty;    /* 0.5*sigmoid((E0 - err_mean)/err_std) + 0.25/(1 + 8*margin) + 0.25*(1 - confidence); NaN
                          without calibration */
    int is_novel;      /* novelty > routing.novelty_theta; without calibration: winner's displayed error > tau */
    int calibrated;    /* header.routing present */
} cmf_skill_routing;

/* Scores every selection: phi[i] is φ at sel[i].phi_layer (sel[i].hidden floats). With header.routing of `f`
 * (f may be NULL: uncalibrated) the calibrated recipe of §3.1 step 4 (err_std floored at 1e-4, T at 1e-3);
 * otherwise step 5 with threshold `fallback_tau` (the reference uses 0.30). n == 0 gives an empty, novel
 * result. Free with cmf_skill_routing_free. Errors: CMF_E_ARG, CMF_E_NOMEM. */
cmf_status cmf_skill_route(const cmf_file *f, const cmf_skill_selection *sel, size_t n, const float *const *phi,
                           double fallback_tau, cmf_skill_routing *out);
void cmf_skill_routing_free(cmf_skill_routing *r);

/* ------------------------------------------------------------------------------------------------------------
 * Task masks (§1.7, §3.4)
 * ---------------------------------------------------------------------------------------------------------- */

enum { CMF_MASK_FALLBACK = 0, CMF_MASK_NORMAL = 1, CMF_MASK_PRIMARY = 2 };

/* One decoded task mask. Bitsets are LSB-first (item i = bit i%8 of byte i/8), 1 = active, tail bits past the
 * real dimension are zero (cleared on load if a file had them set; see tail_bits_cleared). */
typedef struct cmf_task_mask {
    uint32_t task_id;
    char *name;
    char *description;   /* NULL when absent/null */
    double sparsity;     /* as stored (the reference's f32) */
    int priority;        /* CMF_MASK_FALLBACK / NORMAL / PRIMARY */
    int has_quality;     /* 0: quality null/absent ("not measured") */
    char *quality_metric;
    double quality_value;
    char *parent;        /* NULL when absent/null */
    int has_hot_pack;
    int loop_layout;     /* 1: the blob stores one FFN row per virtual layer (§1.7 loop layout) */
    int has_expert_fields;
    uint64_t tail_bits_cleared; /* set bits found past a row's real dimension (a non-conforming writer) */
    uint8_t *ffn;        /* n_virtual_layers rows of ffn_bytes: legacy rows are copied to every pass */
    uint8_t *heads;      /* n_layers rows of head_bytes */
    uint8_t *alive;      /* n_layers bytes, 0/1: the layer gate (0 = the layer is skipped) */
    uint8_t *experts;    /* n_layers rows of expert_bytes, or NULL (no expert restriction) */
} cmf_task_mask;

/* The mask catalog of a file with the geometry its rows were read with. */
typedef struct cmf_masks {
    char *default_task;   /* meta.default_task ("" when absent) */
    size_t n;
    cmf_task_mask *masks; /* meta order */
    uint32_t n_layers, n_loops, n_virtual_layers; /* num_layers, num_loops (>= 1), their product */
    uint32_t intermediate_size, n_heads, n_experts; /* bits per FFN / head / expert row (n_experts 0 without moe) */
    size_t ffn_bytes, head_bytes, gate_bytes, expert_bytes; /* ceil(bits / 8) */
} cmf_masks;

/* Decodes a masks section (§1.7) of `len` bytes against header.arch `arch`: u32 n_masks, u32 meta_len, the meta
 * JSON, blobs at meta.masks[i].blob_off. The blob length chooses the layout (legacy: num_layers FFN rows; loop:
 * num_layers*num_loops rows, pass-major), plus num_layers expert rows when has_expert_fields. *out is always a
 * catalog (n = 0 for len = 0); free with cmf_masks_free. Like the reference decoder, blob offsets need not be
 * 8-aligned and set tail bits are cleared rather than refused (counted in tail_bits_cleared). Errors:
 * CMF_E_FORMAT naming the mask and the field (short section, meta JSON, n_masks, priority, quality, blob bounds,
 * blob_len matching neither layout, expert fields without arch.moe), CMF_E_NOMEM, CMF_E_ARG. */
cmf_status cmf_masks_parse(const cJSON *arch, const uint8_t *sec, uint64_t len, cmf_masks **out);

/* cmf_masks_parse of f's masks section (n = 0 when the file has none). */
cmf_status cmf_masks_load(const cmf_file *f, cmf_masks **out);
void cmf_masks_free(cmf_masks *m);

/* Index of the mask named `name`, or -1. */
int cmf_masks_find(const cmf_masks *m, const char *name);

/* The reference's MaskCatalog::fallback(): the first mask with priority Fallback, else the first mask; -1 when
 * the catalog is empty. */
int cmf_masks_fallback(const cmf_masks *m);

/* Which mask a model runs with, the rule of cortiq 0.5.100 (runtime.rs CortiqRuntime::new + run/bench/serve
 * --task, §3.4, §7 item 18):
 *   1. `task` not NULL and a mask has that name: that mask (an explicit choice wins over CMF_TASK);
 *   2. `task` == "off" or "none": no mask (dense);
 *   3. otherwise the environment variable CMF_TASK == "off": no mask;
 *   4. otherwise the fallback mask (cmf_masks_fallback), i.e. a file with masks runs masked by default.
 * A `task` naming no mask leaves rule 3/4's choice in *index (the reference keeps the current mask) and returns
 * CMF_E_NOT_FOUND with a message listing the masks, so a caller can warn or refuse. One difference from the
 * reference CLI: it passes its default "--task general" even when the user gave none, which overrides
 * CMF_TASK=off whenever a mask is named "general"; here NULL means "not given" and CMF_TASK=off is honoured.
 * *index = -1 means dense. Errors: CMF_E_ARG (NULL m or index), CMF_E_NOT_FOUND as above. */
cmf_status cmf_masks_choose(const cmf_masks *m, const char *task, int *index);

/* Row accessors for the forward pass. `vlayer` is the virtual layer (pass * n_layers + layer; = layer for
 * unlooped models), `layer` the physical one. All return NULL when out of range. */
const uint8_t *cmf_mask_ffn_row(const cmf_masks *m, const cmf_task_mask *t, uint32_t vlayer);
const uint8_t *cmf_mask_head_row(const cmf_masks *m, const cmf_task_mask *t, uint32_t layer);
const uint8_t *cmf_mask_expert_row(const cmf_masks *m, const cmf_task_mask *t, uint32_t layer);
/* Bit i of an LSB-first bitset. */
static inline int cmf_mask_bit(const uint8_t *row, uint32_t i) { return (row[i >> 3] >> (i & 7)) & 1; }
/* Layer gate of physical layer `layer` (1 = alive; an out-of-range layer counts as alive, §1.7). */
int cmf_mask_layer_alive(const cmf_masks *m, const cmf_task_mask *t, uint32_t layer);
/* Number of set bits in the first `bits` bits of `row`. */
uint32_t cmf_mask_popcount(const uint8_t *row, uint32_t bits);

/* Human-readable description for `cmf masks`: the default task, then per mask its task_id, name, priority,
 * sparsity, layers alive, active FFN neurons and heads (totals over the layers), quality, and which mask is
 * active by default (cmf_masks_choose(m, NULL)). malloc'd NUL-terminated text, NULL on allocation failure. */
char *cmf_masks_describe(const cmf_masks *m);

/* ------------------------------------------------------------------------------------------------------------
 * Baking and skill files (§3.2, §3.3)
 * ---------------------------------------------------------------------------------------------------------- */

/* Warnings of the operations below ("skipped ...", "dropped ..."). May be NULL. */
typedef void (*cmf_skill_warn_fn)(void *ctx, const char *msg);

enum { CMF_SKILL_FFN = 1, CMF_SKILL_ATTN = 2, CMF_SKILL_ALL = 3 };

typedef struct cmf_skill_add_opts {
    const char *id;      /* required, [A-Za-z0-9_-] */
    const char *name;    /* display name, or NULL */
    int families;        /* CMF_SKILL_FFN / ATTN / ALL (0 = ALL) */
    const char *layers;  /* "all", "A-B" or "i,j,k"; NULL = all */
    int skill_quant;     /* enum cmf_dtype for 2-D tensors, or -1 = the backbone tensor's dtype */
    cmf_skill_warn_fn warn;
    void *warn_ctx;
} cmf_skill_add_opts;

typedef struct cmf_skill_add_report {
    size_t n_stored;     /* skill tensors written */
    size_t n_unchanged;  /* donor tensors whose encoding equals the backbone's payload (not stored) */
    size_t n_skipped;    /* wanted names missing in the backbone or the donor */
    uint64_t bytes;      /* payload bytes of the stored skill tensors */
    size_t n_replaced;   /* tensors of an earlier skill with the same id that were dropped */
} cmf_skill_add_report;

/* Parses a --layers spec for a model of n_layers: "all", "A-B" (inclusive) or "i,j,k". *out is a malloc'd
 * list (sorted, duplicates removed). Errors: CMF_E_ARG naming the spec (empty, not a number, out of range). */
cmf_status cmf_skill_parse_layers(const char *spec, uint32_t n_layers, uint32_t **out, size_t *n);

/* `skill add` (§3.2): for each chosen layer and family (ffn: mlp.{gate,up,down}_proj.weight; attn:
 * self_attn.{q,k,v,o}_proj.weight and the q/k/v biases), reads the donor tensor (donor = a CMF file, decoded
 * with cmf_dequant, or a Hugging Face directory / .safetensors file, read with convert/safetensors.h), requires
 * the backbone's shape (CMF_E_FORMAT naming the tensor otherwise), encodes it in the backbone tensor's dtype
 * and stores it as skill.<id>.<name> only when that encoding differs from the backbone payload (so a donor
 * equal to the backbone stores nothing). With opts->skill_quant >= 0 the stored 2-D tensors use that dtype
 * instead (1-D keep the backbone's). The output is a complete rewrite through the format writer (temp +
 * rename; out_path may equal model_path): every other tensor byte for byte, earlier skill.<id>.* dropped (re-
 * adding replaces), the registry record {id, name, layers (those actually stored), quality: null} replacing any
 * record of that id, masks and vocab sections kept. Errors: CMF_E_ARG (options, id, layers), CMF_E_NOT_FOUND /
 * CMF_E_ARG when no donor tensor differs, CMF_E_UNSUPPORTED (a dtype with no encoder/decoder, naming the
 * tensor), those of open/convert/writer. `report` may be NULL. */
cmf_status cmf_skill_add(const char *model_path, const char *donor_path, const char *out_path,
                         const cmf_skill_add_opts *opts, cmf_skill_add_report *report);

/* `skill export` (§3.3): writes a standalone skill file at out_path. Two sources:
 *   - in-file skill `id` of model_path: its skill.<id>.<N> tensors stored under the base names N;
 *   - when model_path has no skill `id` and base_path is given: a specialist cut against the base, i.e. every
 *     non-skill tensor of model_path whose dtype, shape or payload differs from base_path's (the reference's
 *     run_skill_export).
 * The base is base_path, or model_path itself when base_path is NULL. Tensors identical to the base's are left
 * out; overlay tensors whose base name is absent from the base are left out with a warning; a shape that
 * differs from the base tensor's is CMF_E_FORMAT. The header is model_path's with skills = one record: id,
 * name (`name`, else the in-file record's), layers (from the exported names), base_dir_hash (16 lowercase hex
 * digits of the base's envelope dir_hash), base_arch (the base's arch_name), task (the mask catalog's
 * default_task, when there are masks), provenance {cut_from, tensors}, and the in-file record's selection,
 * quality and input_mask_task. The writer sets the SKILL_FILE feature bit. The model's masks section is carried;
 * no vocab. *n_tensors (may be NULL) receives the count. Errors: CMF_E_NOT_FOUND (unknown id), CMF_E_ARG
 * (architectures differ, nothing to export), CMF_E_FORMAT, those of open/writer. */
cmf_status cmf_skill_export(const char *model_path, const char *id, const char *base_path, const char *name,
                            const char *out_path, cmf_skill_warn_fn warn, void *warn_ctx, size_t *n_tensors);

typedef struct cmf_skill_apply_report {
    size_t n_replaced; /* base tensors replaced by the skill file's payload */
    size_t n_dropped;  /* skill-file tensors with no tensor of that name in the base (warned about) */
    int forced;        /* 1 when base_dir_hash did not match and force was given */
} cmf_skill_apply_report;

/* `skill apply` (§3.3): compares the skill file's base_dir_hash (its header.skills record that has one) with
 * the hex of the base's envelope dir_hash; a mismatch is CMF_E_ARG unless `force` (then a warning). Writes
 * out_path: every base tensor in base order, with the skill file's payload (dtype, shape) for names the skill
 * file has (a shape different from the base's is CMF_E_FORMAT: the result could not load); skill-file tensors
 * the base lacks are dropped, as the reference does, but each is reported through `warn`. Header: the base's,
 * with skills = [the skill record minus base_dir_hash] (so SKILL_FILE is not set: an ordinary model). Masks:
 * the skill file's when it carries any, else the base's (the reference drops the base's masks in that case;
 * we keep them). Vocab: the base's. Errors: CMF_E_ARG (not a skill file, base mismatch), CMF_E_FORMAT, those of
 * open/writer. `report` may be NULL. */
cmf_status cmf_skill_apply(const char *base_path, const char *skill_path, const char *out_path, int force,
                           cmf_skill_warn_fn warn, void *warn_ctx, cmf_skill_apply_report *report);

/* Internal (bake.c, used by skillfile.c): sets the writer's masks section (when `masks`; validated with
 * cmf_masks_load, loop layout noted) and vocab section (when `vocab`) to f's. Errors: those of the writer and
 * of cmf_masks_load. */
cmf_status cmf_skills_copy_sections(const cmf_file *f, cmf_writer *w, int masks, int vocab);

#endif
