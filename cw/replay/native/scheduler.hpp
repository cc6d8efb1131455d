// The scheduler's state and bookkeeping (cw/serve/scheduler/base.py and the shared part of
// clockwork.py); the policies' methods are in clockwork.hpp and baselines.hpp.

#pragma once

#include "common.hpp"

namespace cwsim {

// --- the scheduler's state (clockwork.py, base.py) --------------------------------------------

struct Req {
  i64 id, arrival, deadline;
  i64 key;    // queue order, the first item of the Python heap's tuples: the deadline
              // (clockwork: EDF), the arrival (baselines: FIFO)
  int model, n;
  bool cold;  // ClockworkScheduler.cold: no GPU held its model when it arrived
};

inline bool req_before(const Req& a, const Req& b) {  // heap order: (key, id)
  return a.key < b.key || (a.key == b.key && a.id < b.id);
}
struct ReqAfter {  // for std::*_heap, which keep the largest on top
  bool operator()(const Req& a, const Req& b) const { return req_before(b, a); }
};

// Rolling p99 of the last `window` measurements (Estimator).
struct Cell {
  i64 value = NONE;
  bool observed = false;
  std::vector<i64> buf;
  int count = 0, head = 0;
};

struct Gpu {
  int worker, index, slot;
  i64 pages, free_pages, exec_free, weights_free, busy = 0;
  int loads_in_flight = 0;
  std::vector<i64> loaded;      // model -> ready at, NONE if absent
  std::vector<i64> loaded_seq;  // dict insertion order of `loaded`
  std::vector<i64> last_used;   // 0 if absent (last_used_ns.get(m, 0))
};

// An insertion-ordered set of model indices (a Python dict's key order): append, remove,
// iterate in order.
struct OrderedModels {
  std::vector<int> prev, next;
  std::vector<char> in;
  int head = -1, tail = -1, size = 0;
  void init(int n) { prev.assign(n, -1); next.assign(n, -1); in.assign(n, 0); }
  bool has(int m) const { return in[m]; }
  void append(int m) {
    in[m] = 1; prev[m] = tail; next[m] = -1;
    if (tail >= 0) next[tail] = m; else head = m;
    tail = m; size++;
  }
  void remove(int m) {
    if (!in[m]) return;
    in[m] = 0;
    if (prev[m] >= 0) next[prev[m]] = next[m]; else head = next[m];
    if (next[m] >= 0) prev[next[m]] = prev[m]; else tail = prev[m];
    size--;
  }
};

struct InFlight {
  int kind, slot, model, batch;
  std::vector<Req> reqs;
  i64 pages;
  i64 earliest = 0;  // (INFER) the start it was planned for
};

const int LATE_START_WINDOW = 100, SLACK_PER_LATENESS = 2;  // as clockwork.py

struct WorkerState {  // margin_ns, _answer_seen_ns and answer_delays (RollingQuantile) per worker
  bool has_margin = false, has_seen = false, has_value = false;
  i64 margin = 0, seen = 0, value = 0;
  std::vector<i64> win;
  int whead = 0;
  i64 count = 0;
  // late_starts (RecentMax) and slack_ns
  std::vector<i64> late;
  int lhead = 0;
  bool has_late = false, has_slack = false;
  i64 late_max = 0, slack = 0;
};

struct Decision {
  int type;
  i64 id;          // request id (FINISH) or action id
  int rstatus;     // FINISH
  i64 action_id;   // FINISH: the INFER that served it, -1 if none
  bool cold;
  int worker, gpu, model, batch, nreq;
  i64 earliest, latest, expected;
};

const int RQ_WINDOW = 1000, RQ_EVERY = 100;
const double RQ_Q = 0.99;

// The policy: ClockworkScheduler, or one of the baselines (baselines.py), which share its
// bookkeeping, loads and results and differ in admission, queue order and planning.
enum { P_CLOCKWORK = 0, P_FIFO = 1, P_BATCH_TIMEOUT = 2, P_CLIPPER = 3 };
const i64 OPEN_WINDOW_NS = (i64)3600 * 1000000000;  // baselines.OPEN_WINDOW_NS

struct Policy {
  int kind = P_CLOCKWORK;
  i64 max_batch = 16, max_queue_delay = 2000000;          // batch-timeout
  i64 slo = 100000000, aimd_step = 1;                      // clipper
  double backoff = 0.9;
};

struct Scheduler {
  Config c;
  Policy p;
  std::vector<int> name_rank;      // model -> rank of its name (baselines break ties by name)
  std::vector<int> busy_infers;    // slot -> INFERs in flight (_Baseline.busy)
  std::vector<double> clipper_batch;  // model -> AIMD batch size, 0 if unset (1.0 then)
  std::vector<Model>* models;
  int nm = 0, nb = 0;  // models; batch-size slots per model (largest size + 1)
  std::vector<Gpu> gpus;
  std::vector<std::vector<Cell>> exec_cells, load_cells;  // [slot][model * nb + b], [slot][model]
  std::vector<std::vector<Req>> heaps;
  OrderedModels queues;
  OrderedModels cold_demand;
  std::vector<i64> cold_demand_t;
  std::unordered_map<i64, InFlight> inflight;
  std::vector<i64> last_exec;  // per slot, 0 if none
  std::vector<WorkerState> workers;
  std::priority_queue<std::pair<i64, i64>, std::vector<std::pair<i64, i64>>,
                      std::greater<std::pair<i64, i64>>> guards;
  i64 next_id = 1;
  bool has_last_sweep = false, has_last_replication = false;
  i64 last_sweep = 0, last_replication = 0;
  i64 loaded_counter = 0;
  i64 lead_cap = -1;  // ClockworkScheduler._lead_cap_ns: set when the first worker joins
  std::vector<Decision>* out;

  void init(std::vector<Model>* ms, std::vector<Decision>* o) {
    models = ms; out = o;
    nm = (int)ms->size();
    for (auto& m : *ms) {
      for (int b : m.batch_sizes) nb = std::max(nb, b + 1);
      for (auto& e : m.exec_info) nb = std::max(nb, e.first + 1);
    }
    heaps.resize(nm);
    queues.init(nm);
    cold_demand.init(nm);
    cold_demand_t.assign(nm, 0);
    clipper_batch.assign(nm, 0.0);
  }
  i64 margin(int worker) const {
    const WorkerState& w = workers[worker];
    return w.has_margin ? w.margin : c.completion_margin;
  }
  Cell& exec_cell(const Gpu& g, int m, int b) { return exec_cells[g.slot][(size_t)m * nb + b]; }
  i64 exec_est(const Gpu& g, int m, int b) { return exec_cell(g, m, b).value; }
  i64 load_est(const Gpu& g, int m) { return load_cells[g.slot][m].value; }
  void seed(Cell& cell, i64 v) { if (!cell.observed) cell.value = v; }
  void observe(Cell& cell, i64 v) {
    int window = (int)c.window;
    if (!cell.observed) { cell.observed = true; cell.buf.assign(window, 0); }
    cell.buf[cell.head] = v;
    cell.head = (cell.head + 1) % window;
    if (cell.count < window) cell.count++;
    int n = cell.count;
    i64 rank = std::min<i64>(n - 1, (i64)(0.99 * n));
    if (rank == n - 1) {
      i64 best = cell.buf[0];
      for (int i = 1; i < n; i++) best = std::max(best, cell.buf[i]);
      cell.value = best;
    } else {
      std::vector<i64> s(cell.buf.begin(), cell.buf.begin() + n);
      std::sort(s.begin(), s.end());
      cell.value = s[rank];
    }
  }
  void set_loaded(Gpu& g, int m, i64 v) {
    if (g.loaded[m] == NONE) g.loaded_seq[m] = ++loaded_counter;
    g.loaded[m] = v;
  }
  Gpu* gpu_of_slot(int slot) { return slot < (int)gpus.size() ? &gpus[slot] : nullptr; }
  // --- events ----------------------------------------------------------------------------
  void worker_joined(i64 now, int worker, int ngpus, i64 pages) {
    if ((int)workers.size() <= worker) workers.resize(worker + 1);
    for (int gi = 0; gi < ngpus; gi++) {
      Gpu g;
      g.worker = worker; g.index = gi; g.slot = (int)gpus.size();
      g.pages = pages; g.free_pages = pages; g.exec_free = now; g.weights_free = now;
      g.loaded.assign(nm, NONE); g.loaded_seq.assign(nm, 0); g.last_used.assign(nm, 0);
      gpus.push_back(std::move(g));
      exec_cells.emplace_back((size_t)nm * nb);
      load_cells.emplace_back(nm);
      last_exec.push_back(0);
      busy_infers.push_back(0);
    }
    if (lead_cap < 0) lead_cap = c.network_latency;
    for (int m = 0; m < nm; m++) {
      const Model& model = (*models)[m];
      lead_cap = std::max(lead_cap, c.network_latency +
                                    (i64)((double)model.largest * model.per_sample));
      for (int gi = 0; gi < ngpus; gi++) {
        Gpu& g = gpus[gpus.size() - ngpus + gi];
        seed(load_cells[g.slot][m], model.load_info);
        for (auto& e : model.exec_info) seed(exec_cell(g, m, e.first), e.second);
      }
    }
  }
  void push_queue(const Req& r) {
    if (!queues.has(r.model)) queues.append(r.model);
    auto& h = heaps[r.model];
    h.push_back(r);
    std::push_heap(h.begin(), h.end(), ReqAfter());
  }
  Req pop_queue(int m) {
    auto& h = heaps[m];
    std::pop_heap(h.begin(), h.end(), ReqAfter());
    Req r = h.back();
    h.pop_back();
    return r;
  }
  void finish(i64 request_id, int status, i64 action_id = -1, bool cold = false) {
    Decision d{};
    d.type = D_FINISH; d.id = request_id; d.rstatus = status; d.action_id = action_id;
    d.cold = cold;
    out->push_back(d);
  }
  void rq_observe(WorkerState& w, i64 value) {
    if (w.win.empty()) w.win.reserve(RQ_WINDOW);
    if ((int)w.win.size() < RQ_WINDOW) w.win.push_back(value);
    else { w.win[w.whead] = value; w.whead = (w.whead + 1) % RQ_WINDOW; }
    w.count += 1;
    if (w.count % RQ_EVERY == 0 || w.count <= RQ_EVERY) {
      if (w.count > RQ_EVERY) {
        std::vector<i64> s(w.win);
        std::sort(s.begin(), s.end());
        size_t len = s.size();
        w.value = s[std::min<size_t>(len - 1, (size_t)(RQ_Q * (double)len))];
      } else {
        w.value = w.has_value ? std::max(value, w.value) : value;
      }
      w.has_value = true;
    }
  }
  // ClockworkScheduler._saw_start (RecentMax.observe)
  void saw_start(WorkerState& w, i64 late) {
    late = std::max<i64>(0, late);
    bool full = (int)w.late.size() == LATE_START_WINDOW;
    i64 gone = 0;
    if (!full) w.late.push_back(late);
    else { gone = w.late[w.lhead]; w.late[w.lhead] = late; w.lhead = (w.lhead + 1) % LATE_START_WINDOW; }
    if (!w.has_late || late >= w.late_max) { w.late_max = late; w.has_late = true; }
    else if (full && gone == w.late_max) w.late_max = *std::max_element(w.late.begin(), w.late.end());
    w.has_slack = true;
    w.slack = std::max(c.infer_slack, SLACK_PER_LATENESS * w.late_max);
  }
  i64 slack(int worker) const {
    const WorkerState& w = workers[worker];
    return w.has_slack ? w.slack : c.infer_slack;
  }
  void rq_forget(WorkerState& w) {
    w.win.clear(); w.whead = 0; w.count = 0; w.has_value = false; w.value = 0;
  }

  struct Best { i64 urgency, start; int b, k; i64 est, deadline; };  // best_batch's choice

  // clockwork.hpp
  void request_arrived(i64 now, Req r);
  void result_returned(i64 now, i64 action_id, int status, i64 start, i64 end, i64 device);
  void infer_returned(i64 now, i64 action_id, int status, i64 start, i64 end, i64 device,
                      InFlight& f, Gpu* gpu);
  void tick(i64 now);
  void time_out_overdue(i64 now);
  void expire_margins(i64 now);
  bool feasibility(i64 now, int m, i64 deadline, bool* resident);
  void reject_infeasible(i64 now);
  bool best_batch(i64 now, Gpu& g, int m, Best* best);
  bool holds_any(const Gpu& g, const std::vector<char>& set, int n_in_set);
  void plan_infers(i64 now);
  double demand(i64 now, int m);
  bool resident(int m);
  bool backlogged(i64 now, int m);
  void plan_loads(i64 now, bool replicate);
  bool find_victims(Gpu& g, i64 needed, std::vector<int>* victims);
  i64 next_wakeup(i64 now);

  // baselines.hpp
  bool baseline_servable(int m);
  void baseline_arrived(const Req& r0);
  i64 batch_for(i64 now, int m);
  void clipper_observe(const InFlight& f, i64 device);
  void baseline_plan(i64 now);
  void send_batch(i64 now, Gpu& g, int model, i64 k);
  i64 baseline_wakeup(i64 now);
};

}  // namespace cwsim
