// The baseline policies: cw/serve/scheduler/baselines.py, decision for decision.

#pragma once

#include "scheduler.hpp"

namespace cwsim {

// No GPU can hold the model (baselines.py's _servable; every simulated worker has every model):
// rejected, or it would wait forever.
bool Scheduler::baseline_servable(int m) {
  for (auto& g : gpus)
    if ((*models)[m].pages <= g.pages) return true;
  return false;
}

void Scheduler::baseline_arrived(const Req& r0) {
  if (p.kind == P_CLIPPER) p.slo = r0.deadline - r0.arrival;  // the SLO the AIMD aims at
  if (!baseline_servable(r0.model)) return finish(r0.id, RS_REJECTED);
  Req r = r0;
  r.key = r.arrival;  // FIFO per model
  r.cold = !resident(r.model);
  push_queue(r);
}

i64 Scheduler::batch_for(i64 now, int m) {
  const Model& info = (*models)[m];
  i64 waiting = (i64)heaps[m].size();
  if (p.kind == P_FIFO) return 1;
  if (p.kind == P_BATCH_TIMEOUT) {
    i64 limit = std::min<i64>(p.max_batch, info.batch_sizes.back());
    if (waiting >= limit || now - heaps[m].front().key >= p.max_queue_delay)
      return std::min(waiting, limit);
    return 0;
  }
  double current = clipper_batch[m] > 0 ? clipper_batch[m] : 1.0;
  return std::max<i64>(1, std::min(std::min((i64)current, (i64)info.batch_sizes.back()),
                                   waiting));
}

void Scheduler::clipper_observe(const InFlight& f, i64 device) {
  double current = clipper_batch[f.model] > 0 ? clipper_batch[f.model] : 1.0;
  double limit = (double)(*models)[f.model].batch_sizes.back();
  clipper_batch[f.model] = device > p.slo ? std::max(1.0, current * p.backoff)
                                          : std::min(limit, current + (double)p.aimd_step);
}

void Scheduler::baseline_plan(i64 now) {
  for (auto& g : gpus) {
    if (busy_infers[g.slot]) continue;
    int model = -1;
    i64 best_key = 0;
    for (int m = queues.head; m >= 0; m = queues.next[m]) {
      if (g.loaded[m] == NONE || batch_for(now, m) <= 0) continue;
      i64 key = heaps[m].front().key;  // min((head key, model name)) over ready models
      if (model < 0 || key < best_key || (key == best_key && name_rank[m] < name_rank[model])) {
        model = m;
        best_key = key;
      }
    }
    if (model >= 0) send_batch(now, g, model, batch_for(now, model));
  }
}

void Scheduler::send_batch(i64 now, Gpu& g, int model, i64 k) {
  const Model& info = (*models)[model];
  InFlight f;
  f.kind = K_INFER; f.slot = g.slot; f.model = model; f.pages = 0;
  i64 take = std::min<i64>(k, (i64)heaps[model].size());
  for (i64 i = 0; i < take; i++) f.reqs.push_back(pop_queue(model));
  if (heaps[model].empty()) queues.remove(model);
  int b = info.padded[f.reqs.size()];
  f.batch = b;
  i64 est = exec_est(g, model, b);
  i64 start = std::max(std::max(now + c.network_latency, g.exec_free), g.loaded[model]);
  i64 action_id = next_id++;
  Decision d{};
  d.type = D_INFER; d.id = action_id; d.worker = g.worker; d.gpu = g.index;
  d.model = model; d.batch = b; d.nreq = (int)f.reqs.size();
  d.earliest = start; d.latest = start + OPEN_WINDOW_NS; d.expected = est;
  out->push_back(d);
  inflight.emplace(action_id, std::move(f));
  last_exec[g.slot] = action_id;
  busy_infers[g.slot] += 1;
  g.exec_free = start + est;
  g.busy += est;
  g.last_used[model] = now;
}

i64 Scheduler::baseline_wakeup(i64 now) {
  // GPUs free up and loads complete through results, which tick: a fallback timer only
  if (!queues.size) return NONE;
  if (p.kind != P_BATCH_TIMEOUT) return now + 10000000;
  i64 least = NONE;
  for (int m = queues.head; m >= 0; m = queues.next[m]) {
    i64 t = heaps[m].front().key + p.max_queue_delay;
    if (t > now && (least == NONE || t < least)) least = t;
  }
  return least == NONE ? now + 10000000 : least;
}


}  // namespace cwsim
