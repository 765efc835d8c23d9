/* session_sample.c — cmf_session_sample: the next token from a session's last logits, on the device where they
 * are (the cuda backend's `sample` op, src/backend/cuda/sample.cu) or on the host (cmf_sampler_sample). The device
 * computes steps 1-2 (greedy) or 1-4 (top-k) of src/sample/sample.h with the host's float operations and hands
 * back the id or the sorted top-k list; cmf_sampler_finish_topk runs steps 5-7 on that list, so the token and the
 * generator's advance are those of cmf_sampler_sample on the full row. */
#include <math.h>
#include <stdlib.h>

#include "backend/backend.h"
#include "model/model.h"
#include "sample/sample.h"
#include "util/error.h"

/* Scratch of one device top-k answer (k <= CMF_DEV_SAMPLE_MAXK), per thread: sampling allocates nothing. */
static _Thread_local int32_t t_ids[CMF_DEV_SAMPLE_MAXK];
static _Thread_local float t_z[CMF_DEV_SAMPLE_MAXK];
static _Thread_local cmf_sample_cand t_cand[CMF_DEV_SAMPLE_MAXK];

cmf_status cmf_session_sample(cmf_session *s, cmf_sampler *smp, int32_t *token) {
    if (!s || !smp || !token) return cmf_err(CMF_E_ARG, "cmf_session_sample: NULL argument");
    const int V = s->m->cfg.vocab_size;
    if (cmf_sampler_vocab(smp) != V)
        return cmf_err(CMF_E_ARG, "cmf_session_sample: the sampler has %d ids, the model's vocabulary %d",
                       cmf_sampler_vocab(smp), V);
    if (s->pos == 0)
        return cmf_err(CMF_E_ARG, "cmf_session_sample: the session holds no position yet (prefill first)");
    const cmf_sampler_params *p = cmf_sampler_params_of(smp);
    cmf_backend *be = s->m->be;
    const int greedy = p->temperature <= 0.0f;
    const int device = s->logits_dev && be->sample && (greedy || (p->top_k > 0 && p->top_k <= CMF_DEV_SAMPLE_MAXK));
    if (!device) {
        const float *l = cmf_session_logits(s); /* NULL only when its download failed (message set) */
        return l ? cmf_sampler_sample(smp, l, token) : CMF_E_IO;
    }

    cmf_dev_sample req = {0};
    req.k = greedy ? 0 : p->top_k;
    req.temperature = p->temperature;
    req.n_pen = cmf_sampler_penalty_window(smp, &req.pen_ids, &req.pen_counts);
    req.repeat_penalty = p->repeat_penalty;
    req.presence_penalty = p->presence_penalty;
    req.frequency_penalty = p->frequency_penalty;
    req.ids = t_ids;
    req.z = t_z;
    t_z[0] = NAN; /* greedy: a backend that does not report the maximum leaves no stale value behind */
    cmf_status st = be->sample(be, s->dlogits, V, &req);
    if (st != CMF_OK) return cmf_err_prefix(st, "cmf_session_sample: ");
    if (greedy) { /* as cmf_sampler_sample's greedy branch */
        if (req.n_out < 1) return cmf_err(CMF_E_ARG, "sampler: every logit is NaN");
        if (t_z[0] == -INFINITY) return cmf_err(CMF_E_ARG, "sampler: no token has a finite logit (every one is -inf)");
        *token = t_ids[0];
    } else {
        for (int i = 0; i < req.n_out; i++) {
            t_cand[i].z = t_z[i];
            t_cand[i].id = t_ids[i];
        }
        if ((st = cmf_sampler_finish_topk(smp, t_cand, req.n_out, token)) != CMF_OK) return st;
    }
    if (cmf_sampler_fits(smp, *token)) return CMF_OK;
    /* a constraint refused the device's token: the host redraw on the whole row, as cmf_sampler_sample's */
    const float *l = cmf_session_logits(s);
    return l ? cmf_sampler_sample_masked(smp, l, token) : CMF_E_IO;
}
