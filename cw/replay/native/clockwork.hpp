// The Clockwork policy: cw/serve/scheduler/clockwork.py, decision for decision.

#pragma once

#include "scheduler.hpp"

namespace cwsim {

void Scheduler::request_arrived(i64 now, Req r) {
  if (p.kind != P_CLOCKWORK) return baseline_arrived(r);
  bool resident;
  bool feasible = feasibility(now, r.model, r.deadline, &resident);
  if (!feasible) {
    if (!resident) {
      if (!cold_demand.has(r.model)) cold_demand.append(r.model);
      cold_demand_t[r.model] = now;
    }
    finish(r.id, RS_REJECTED);
    return;
  }
  r.cold = !resident;
  push_queue(r);
}

void Scheduler::result_returned(i64 now, i64 action_id, int status, i64 start, i64 end,
                                i64 device) {
  auto it = inflight.find(action_id);
  if (it == inflight.end()) return;
  if (p.kind != P_CLOCKWORK && it->second.kind == K_INFER) {
    int& busy = busy_infers[it->second.slot];
    busy = std::max(0, busy - 1);
    if (status == S_OK && p.kind == P_CLIPPER) clipper_observe(it->second, device);
  }
  InFlight f = std::move(it->second);
  inflight.erase(it);
  Gpu* gpu = gpu_of_slot(f.slot);
  if (f.kind == K_INFER) {
    infer_returned(now, action_id, status, start, end, device, f, gpu);
  } else if (f.kind == K_LOAD && gpu) {
    gpu->loads_in_flight -= 1;
    if (status == S_OK) {
      observe(load_cells[f.slot][f.model], device);
      i64 cur = gpu->loaded[f.model];
      set_loaded(*gpu, f.model, std::min(cur == NONE ? end : cur, end));
    } else if (status != S_ALREADY_LOADED) {
      gpu->loaded[f.model] = NONE;
      gpu->free_pages += f.pages;
    }
  }
}

void Scheduler::infer_returned(i64 now, i64 action_id, int status, i64 start, i64 end, i64 device,
                               InFlight& f, Gpu* gpu) {
  if (c.adapt_slack && (status == S_OK || status == S_TOO_LATE)) {
    saw_start(workers[gpus[f.slot].worker], (start ? start : now) - f.earliest);
  }
  if (status == S_OK) {
    int worker = gpus[f.slot].worker;  // slots are never removed in a simulation
    WorkerState& w = workers[worker];
    rq_observe(w, std::max<i64>(0, now - end));
    w.has_seen = true; w.seen = now;
    w.has_margin = true; w.margin = std::max(c.completion_margin, w.value);
    if (gpu) {
      observe(exec_cell(*gpu, f.model, f.batch), device);
      if (last_exec[f.slot] == action_id) gpu->exec_free = end;
    }
    for (auto& r : f.reqs) finish(r.id, RS_OK, action_id, r.cold);
    return;
  }
  if (status == S_NOT_LOADED && gpu) gpu->loaded[f.model] = NONE;
  if (status == S_TOO_LATE || status == S_NOT_LOADED || status == S_SHUTTING_DOWN) {
    for (auto& r : f.reqs) push_queue(r);
    has_last_sweep = false;
    return;
  }
  for (auto& r : f.reqs) finish(r.id, status == S_BAD_INPUT ? RS_BAD_INPUT : RS_ERROR);
}

// --- planning --------------------------------------------------------------------------
void Scheduler::tick(i64 now) {
  if (!has_last_sweep || now - last_sweep >= c.reject_sweep) {
    has_last_sweep = true; last_sweep = now;
    expire_margins(now);
    // baselines: GPUs never leave a simulation, so nothing queued becomes unservable
    if (p.kind == P_CLOCKWORK) reject_infeasible(now);
  }
  if (!guards.empty() && guards.top().first <= now + c.answer_guard) time_out_overdue(now);
  if (p.kind == P_CLOCKWORK) plan_infers(now);
  else baseline_plan(now);
  bool replicate = !has_last_replication || now - last_replication >= c.replication_check;
  if (replicate) { has_last_replication = true; last_replication = now; }
  plan_loads(now, replicate);
}

void Scheduler::time_out_overdue(i64 now) {
  i64 limit = now + c.answer_guard;
  while (!guards.empty() && guards.top().first <= limit) {
    i64 action_id = guards.top().second;
    guards.pop();
    auto it = inflight.find(action_id);
    if (it == inflight.end() || it->second.reqs.empty()) continue;
    std::vector<Req> waiting;
    for (auto& r : it->second.reqs) {
      if (r.deadline <= limit) finish(r.id, RS_TIMED_OUT);
      else waiting.push_back(r);
    }
    it->second.reqs = waiting;
    if (!waiting.empty()) {
      i64 first = waiting[0].deadline;
      for (auto& r : waiting) first = std::min(first, r.deadline);
      guards.push({first, action_id});
    }
  }
}

void Scheduler::expire_margins(i64 now) {
  for (auto& w : workers) {
    if (w.has_margin && w.margin > c.completion_margin &&
        now - (w.has_seen ? w.seen : now) > c.margin_expiry) {
      w.has_margin = false;
      rq_forget(w);
    }
  }
}

bool Scheduler::feasibility(i64 now, int m, i64 deadline, bool* resident) {
  const Model& info = (*models)[m];
  int b = info.batch_sizes[0];
  i64 reach = now + c.network_latency;
  i64 floor = reach + (i64)info.per_sample;
  size_t ncold = 0;
  for (auto& g : gpus) {
    i64 ready = g.loaded[m];
    if (ready == NONE) { ncold++; continue; }
    if (std::max(std::max(floor, g.exec_free), ready) + exec_est(g, m, b) <=
        deadline - margin(g.worker)) {
      *resident = true;
      return true;
    }
  }
  *resident = ncold < gpus.size();
  for (auto& g : gpus) {  // every worker holds every model in a simulation
    if (g.loaded[m] != NONE || info.pages > g.pages) continue;
    i64 ready = std::max(floor, g.weights_free) + load_est(g, m);
    if (std::max(ready, g.exec_free) + exec_est(g, m, b) <= deadline - margin(g.worker))
      return true;
  }
  return false;
}

void Scheduler::reject_infeasible(i64 now) {
  bool resident;
  for (int m = queues.head, nx; m >= 0; m = nx) {
    nx = queues.next[m];
    auto& h = heaps[m];
    while (!h.empty() && !feasibility(now, m, h.front().deadline, &resident)) {
      Req r = pop_queue(m);
      finish(r.id, RS_REJECTED);
    }
    if (h.empty()) queues.remove(m);
  }
}

// The k smallest requests of a queue heap, in order (ClockworkScheduler's _heap_head): a walk
// from the root reads O(k log k) of it, where copying and sorting read all of it, and an
// overloaded model's queue holds thousands. It relies on the layout std::push_heap uses in
// libstdc++ and libc++ (as heapq does): the children of i at 2i+1 and 2i+2.
static std::vector<Req> heap_head(const std::vector<Req>& h, size_t k) {
  std::vector<Req> head;
  if (h.size() <= k) {
    head.assign(h.begin(), h.end());
    std::sort(head.begin(), head.end(), req_before);
    return head;
  }
  head.reserve(k);
  auto later = [&h](size_t a, size_t b) { return req_before(h[b], h[a]); };
  std::vector<size_t> frontier{0};
  while (head.size() < k) {
    std::pop_heap(frontier.begin(), frontier.end(), later);
    size_t i = frontier.back();
    frontier.pop_back();
    head.push_back(h[i]);
    for (size_t child = 2 * i + 1; child <= 2 * i + 2 && child < h.size(); child++) {
      frontier.push_back(child);
      std::push_heap(frontier.begin(), frontier.end(), later);
    }
  }
  return head;
}

bool Scheduler::best_batch(i64 now, Gpu& g, int m, Best* best) {
  const Model& info = (*models)[m];
  int largest = info.largest;
  i64 floor = std::max(g.exec_free, g.loaded[m]);
  i64 reach = now + c.network_latency;
  i64 due = g.exec_free - c.schedule_ahead;  // see ClockworkScheduler._best_batch
  auto& h = heaps[m];
  i64 deadline = h.front().key - margin(g.worker);
  if (h.size() == 1) {
    const Req& r = h.front();
    if (r.n > largest) return false;
    int b = info.padded[r.n];
    i64 arrive = reach + (i64)((double)r.n * info.per_sample);
    if (arrive <= due) return false;
    i64 est = exec_est(g, m, b);
    i64 start = std::max(floor, arrive);
    if (start + est > deadline) return false;
    *best = {deadline - est, start, b, 1, est, deadline};
    return true;
  }
  std::vector<Req> head = heap_head(h, (size_t)largest);
  size_t take = head.size();
  int samples = 0;
  double input_ns = 0;
  std::vector<int> prefix;
  std::vector<double> inputs_ns;
  for (size_t i = 0; i < take; i++) {
    const Req& r = head[i];
    if (samples + r.n > largest) break;
    samples += r.n;
    input_ns += (double)r.n * info.per_sample;
    prefix.push_back(samples);
    inputs_ns.push_back(input_ns);
  }
  for (int k = (int)prefix.size(); k >= 1; k--) {
    i64 arrive = reach + (i64)inputs_ns[k - 1];
    if (arrive <= due) return false;
    int b = info.padded[prefix[k - 1]];
    i64 est = exec_est(g, m, b);
    i64 start = std::max(floor, arrive);
    if (start + est <= deadline) {
      *best = {deadline - est, start, b, k, est, deadline};
      return true;
    }
  }
  return false;
}

bool Scheduler::holds_any(const Gpu& g, const std::vector<char>& set, int n_in_set) {
  if (!n_in_set) return false;
  for (int m = queues.head; m >= 0; m = queues.next[m])
    if (set[m] && g.loaded[m] != NONE) return true;
  return false;
}

void Scheduler::plan_infers(i64 now) {
  if (!queues.size) return;
  i64 horizon = now + c.schedule_ahead + std::max<i64>(lead_cap, c.network_latency);
  std::vector<int> candidates;
  for (size_t i = 0; i < gpus.size(); i++)
    if (gpus[i].exec_free < horizon) candidates.push_back((int)i);
  std::vector<char> planned(gpus.size()), touched(nm);
  std::vector<int> touched_list;
  while (!candidates.empty() && queues.size) {
    std::fill(planned.begin(), planned.end(), 0);
    for (int m : touched_list) touched[m] = 0;
    touched_list.clear();
    bool any_planned = false;
    std::vector<int> order(candidates);
    std::vector<i64> keys(gpus.size());
    for (int i : order) keys[i] = gpus[i].exec_free;
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return keys[a] < keys[b]; });
    for (int gi : order) {
      if (!queues.size) break;
      Gpu& g = gpus[gi];
      Best best{}, opt{};
      int model = -1;
      for (int m = queues.head; m >= 0; m = queues.next[m]) {
        if (g.loaded[m] == NONE) continue;
        if (best_batch(now, g, m, &opt) && (model < 0 || opt.urgency < best.urgency)) {
          best = opt;
          model = m;
        }
      }
      if (model < 0) continue;
      InFlight f;
      f.kind = K_INFER; f.slot = g.slot; f.model = model; f.batch = best.b; f.pages = 0;
      f.earliest = best.start;
      for (int i = 0; i < best.k; i++) f.reqs.push_back(pop_queue(model));
      if (heaps[model].empty()) queues.remove(model);
      if (!touched[model]) { touched[model] = 1; touched_list.push_back(model); }
      i64 action_id = next_id++;
      i64 latest = std::min(best.start + slack(g.worker), best.deadline - best.est);
      Decision d{};
      d.type = D_INFER; d.id = action_id; d.worker = g.worker; d.gpu = g.index;
      d.model = model; d.batch = best.b; d.nreq = best.k;
      d.earliest = best.start; d.latest = latest; d.expected = best.est;
      out->push_back(d);
      guards.push({f.reqs[0].deadline, action_id});
      inflight.emplace(action_id, std::move(f));
      last_exec[g.slot] = action_id;
      g.exec_free = best.start + best.est;
      g.busy += best.est;
      g.last_used[model] = now;
      planned[gi] = 1;
      any_planned = true;
    }
    if (!any_planned || !queues.size) break;
    int n_touched = 0;
    for (int m : touched_list) {
      if (queues.has(m)) n_touched++;
      else touched[m] = 0;
    }
    std::vector<int> next_candidates;
    for (int gi : candidates) {
      Gpu& g = gpus[gi];
      if (g.exec_free < horizon && (planned[gi] || holds_any(g, touched, n_touched)))
        next_candidates.push_back(gi);
    }
    candidates.swap(next_candidates);
  }
}

double Scheduler::demand(i64 now, int m) {
  if (!queues.has(m)) return 0.0;
  auto& h = heaps[m];
  i64 num = (i64)h.size() * (*models)[m].min_exec_info;
  return (double)num / (double)std::max<i64>(1, h.front().key - now);
}

bool Scheduler::resident(int m) {
  for (auto& g : gpus) if (g.loaded[m] != NONE) return true;
  return false;
}

bool Scheduler::backlogged(i64 now, int m) {
  auto& h = heaps[m];
  std::vector<Gpu*> holders;
  for (auto& g : gpus) if (g.loaded[m] != NONE) holders.push_back(&g);
  if (holders.empty()) return true;
  const Model& info = (*models)[m];
  int biggest = info.batch_sizes.back();
  double per = (double)h.size() / (double)biggest;
  double work = 0;
  for (Gpu* g : holders) work += per * (double)exec_est(*g, m, biggest);
  work /= (double)holders.size();
  i64 capacity = 0;
  for (Gpu* g : holders)
    capacity += std::max<i64>(0, h.front().key -
                                     std::max(std::max(now, g->exec_free), g->loaded[m]));
  if (work > (double)capacity) return true;
  i64 horizon = now + c.schedule_ahead;
  i64 least = holders[0]->exec_free;
  for (Gpu* g : holders) least = std::min(least, g->exec_free);
  if (least <= horizon + c.schedule_ahead) return false;
  for (auto& g : gpus)
    if (g.exec_free <= now && g.loaded[m] == NONE) return true;
  return false;
}

void Scheduler::plan_loads(i64 now, bool replicate) {
  if (!queues.size && !cold_demand.size) return;
  std::vector<int> wanted;
  for (int m = queues.head; m >= 0; m = queues.next[m])
    if (!resident(m) || (replicate && backlogged(now, m))) wanted.push_back(m);
  for (int m = cold_demand.head, nx; m >= 0; m = nx) {
    nx = cold_demand.next[m];
    if (resident(m) || now - cold_demand_t[m] > COLD_DEMAND_TTL_NS) cold_demand.remove(m);
    else if (!queues.has(m)) wanted.push_back(m);
  }
  if (wanted.empty()) return;
  std::vector<double> keys(wanted.size());
  for (size_t i = 0; i < wanted.size(); i++) keys[i] = -demand(now, wanted[i]);
  std::vector<size_t> order(wanted.size());
  for (size_t i = 0; i < order.size(); i++) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return keys[a] < keys[b]; });
  for (size_t oi : order) {
    int model = wanted[oi];
    const Model& info = (*models)[model];
    std::vector<int> candidates;
    for (size_t gi = 0; gi < gpus.size(); gi++) {
      Gpu& g = gpus[gi];
      if (g.loaded[model] == NONE && g.loads_in_flight < c.max_loads && info.pages <= g.pages)
        candidates.push_back((int)gi);
    }
    std::vector<std::pair<i64, i64>> ckeys(gpus.size());
    for (int gi : candidates) ckeys[gi] = {gpus[gi].exec_free, -gpus[gi].free_pages};
    std::stable_sort(candidates.begin(), candidates.end(),
                     [&](int a, int b) { return ckeys[a] < ckeys[b]; });
    for (int gi : candidates) {
      Gpu& g = gpus[gi];
      std::vector<int> victims;
      if (!find_victims(g, info.pages - g.free_pages, &victims)) continue;
      i64 earliest = std::max(now + c.network_latency, g.weights_free);
      for (int victim : victims) {
        i64 action_id = next_id++;
        Decision d{};
        d.type = D_UNLOAD; d.id = action_id; d.worker = g.worker; d.gpu = g.index;
        d.model = victim; d.earliest = earliest; d.latest = earliest + c.load_slack;
        d.expected = 0;
        out->push_back(d);
        InFlight f;
        f.kind = K_UNLOAD; f.slot = g.slot; f.model = victim; f.batch = 0; f.pages = 0;
        inflight.emplace(action_id, std::move(f));
        g.loaded[victim] = NONE;
        g.last_used[victim] = 0;
        g.free_pages += (*models)[victim].pages;
      }
      i64 est = load_est(g, model);
      i64 action_id = next_id++;
      Decision d{};
      d.type = D_LOAD; d.id = action_id; d.worker = g.worker; d.gpu = g.index;
      d.model = model; d.earliest = earliest; d.latest = earliest + c.load_slack;
      d.expected = est;
      out->push_back(d);
      InFlight f;
      f.kind = K_LOAD; f.slot = g.slot; f.model = model; f.batch = 0; f.pages = info.pages;
      inflight.emplace(action_id, std::move(f));
      set_loaded(g, model, earliest + est);
      g.weights_free = earliest + est;
      g.loads_in_flight += 1;
      g.free_pages -= info.pages;
      g.last_used[model] = now;
      break;
    }
  }
}

bool Scheduler::find_victims(Gpu& g, i64 needed, std::vector<int>* victims) {
  if (needed <= 0) return true;
  std::vector<char> busy(nm);
  for (auto& kv : inflight)
    if (kv.second.slot == g.slot) busy[kv.second.model] = 1;
  std::vector<int> idle;
  for (int m = 0; m < nm; m++)
    if (g.loaded[m] != NONE && !busy[m] && !queues.has(m)) idle.push_back(m);
  std::sort(idle.begin(), idle.end(), [&](int a, int b) {
    if (g.last_used[a] != g.last_used[b]) return g.last_used[a] < g.last_used[b];
    return g.loaded_seq[a] < g.loaded_seq[b];
  });
  i64 freed = 0;
  for (int m : idle) {
    victims->push_back(m);
    freed += (*models)[m].pages;
    if (freed >= needed) return true;
  }
  return false;
}

i64 Scheduler::next_wakeup(i64 now) {
  if (p.kind != P_CLOCKWORK) return baseline_wakeup(now);
  while (!guards.empty() && !inflight.count(guards.top().second)) guards.pop();
  bool has_guard = !guards.empty();
  i64 guard = has_guard ? guards.top().first - c.answer_guard : 0;
  if (!queues.size) return has_guard ? std::max(now + 100000, guard) : NONE;
  i64 least = NONE;
  auto take = [&](i64 t) { if (least == NONE || t < least) least = t; };
  for (auto& g : gpus) {  // ClockworkScheduler._wake_lead_ns
    i64 lead = NONE;
    for (int m = queues.head; m >= 0; m = queues.next[m]) {
      if (g.loaded[m] == NONE) continue;
      const Model& info = (*models)[m];
      int samples = std::min((int)heaps[m].size(), info.largest);
      i64 t = (i64)((double)samples * info.per_sample);
      if (lead == NONE || t > lead) lead = t;
    }
    if (lead != NONE) take(g.exec_free - c.schedule_ahead - (lead + c.network_latency) + 1);
  }
  for (int m = queues.head; m >= 0; m = queues.next[m])
    take(heaps[m].front().key - c.completion_margin);
  if (has_guard) take(guard);
  return least == NONE ? NONE : std::max(now + 100000, least);
}


}  // namespace cwsim
