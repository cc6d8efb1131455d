// The virtual-time simulation of cw/replay/simulate.py with the Clockwork policy of
// cw/serve/scheduler/clockwork.py, compiled. It takes the same decisions in the same order as
// the Python code it mirrors (tests/integration/test_fastsim.py compares the telemetry byte for
// byte), so a change to either Python module must be made here too. The baseline policies of
// cw/serve/scheduler/baselines.py are here as well.
//
// Why it exists: issue 6 asks for virtual/wall >= 100 at 1,000 r/s, i.e. <= 10 us per request
// for everything, and the Python event loop alone needs ~9 us (docs/benchmarks.md).
//
// Names follow the Python code; comments there explain the policy. Only what a simulation needs
// is here: workers join once at time 0 and hold every model, requests carry one sample through
// the socket (never shared memory), and Finish messages carry no text.
//
// Built against the stable ABI (Python >= 3.11), so one build loads on 3.11 and 3.12.

#define PY_SSIZE_T_CLEAN
#define Py_LIMITED_API 0x030B0000
#include <Python.h>

#include <algorithm>
#include <charconv>
#include <string>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <queue>
#include <unordered_map>
#include <utility>
#include <vector>

namespace {

typedef int64_t i64;
const i64 NONE = INT64_MIN;
const i64 NEVER = (i64)1 << 62;
const i64 COLD_DEMAND_TTL_NS = 1000000000;

// cw.serve.protocol.Status / RequestStatus values (checked by cw/replay/fastsim.py at import)
enum { S_OK = 0, S_TOO_LATE = 2, S_NOT_LOADED = 3, S_NO_PAGES = 4, S_ALREADY_LOADED = 5,
       S_BAD_INPUT = 7, S_SHUTTING_DOWN = 12 };
enum { RS_OK = 0, RS_REJECTED = 1, RS_TIMED_OUT = 2, RS_BAD_INPUT = 4, RS_ERROR = 6 };
enum { K_INFER = 0, K_LOAD = 1, K_UNLOAD = 2 };  // telemetry's kind, as ACTION_KINDS in fastsim.py
enum { D_FINISH = 0, D_INFER = 1, D_LOAD = 2, D_UNLOAD = 3 };
enum { E_ARRIVAL = 0, E_RESULT = 2, E_TICK = 3 };  // as simulate.py: arrivals, results, ticks

struct Config {
  // SchedulerConfig
  i64 schedule_ahead, infer_slack, load_slack;
  i64 max_loads, window, network_latency;
  double input_ns_per_byte;
  i64 completion_margin, margin_expiry, answer_guard, reject_sweep, replication_check;
  // SimConfig
  i64 workers, gpus_per_worker, pages_per_gpu, network_ns;
  double noise;
  i64 seed;
};

struct Model {
  i64 pages = 0;
  std::vector<int> batch_sizes;
  i64 load_info = 0;                              // ModelInfo.load_ns (estimate seed)
  std::vector<std::pair<int, i64>> exec_info;     // ModelInfo.exec_ns items, in order
  i64 min_exec_info = 0;
  std::vector<int> padded;
  double per_sample = 0;
  int largest = 0;
  // the simulated worker's durations (Estimates), indexed by batch size
  i64 sim_load = 0;
  std::vector<i64> sim_exec, sim_input, sim_output;
};

// Python's random.Random: MT19937 seeded by init_by_array, random() from two draws, gauss by
// Box-Muller with its cached second value, so that noisy runs match the Python simulator.
struct PyRandom {
  uint32_t mt[624];
  int mti = 625;
  bool has_next = false;
  double gauss_next = 0;

  void init_genrand(uint32_t s) {
    mt[0] = s;
    for (mti = 1; mti < 624; mti++)
      mt[mti] = 1812433253U * (mt[mti - 1] ^ (mt[mti - 1] >> 30)) + (uint32_t)mti;
  }
  // random.seed(n) for an int n: init_by_array over abs(n)'s 32-bit words, least first
  void seed(const std::vector<uint32_t>& key) {
    int len = (int)key.size();
    init_genrand(19650218U);
    int i = 1, j = 0;
    for (int k = std::max(624, len); k; k--) {
      mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1664525U)) + key[j] + (uint32_t)j;
      i++; j++;
      if (i >= 624) { mt[0] = mt[623]; i = 1; }
      if (j >= len) j = 0;
    }
    for (int k = 623; k; k--) {
      mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1566083941U)) - (uint32_t)i;
      i++;
      if (i >= 624) { mt[0] = mt[623]; i = 1; }
    }
    mt[0] = 0x80000000U;
    mti = 624;
    has_next = false;
  }
  uint32_t next32() {
    static const uint32_t mag01[2] = {0x0U, 0x9908b0dfU};
    uint32_t y;
    if (mti >= 624) {
      int kk;
      for (kk = 0; kk < 624 - 397; kk++) {
        y = (mt[kk] & 0x80000000U) | (mt[kk + 1] & 0x7fffffffU);
        mt[kk] = mt[kk + 397] ^ (y >> 1) ^ mag01[y & 0x1U];
      }
      for (; kk < 623; kk++) {
        y = (mt[kk] & 0x80000000U) | (mt[kk + 1] & 0x7fffffffU);
        mt[kk] = mt[kk + (397 - 624)] ^ (y >> 1) ^ mag01[y & 0x1U];
      }
      y = (mt[623] & 0x80000000U) | (mt[0] & 0x7fffffffU);
      mt[623] = mt[396] ^ (y >> 1) ^ mag01[y & 0x1U];
      mti = 0;
    }
    y = mt[mti++];
    y ^= (y >> 11);
    y ^= (y << 7) & 0x9d2c5680U;
    y ^= (y << 15) & 0xefc60000U;
    y ^= (y >> 18);
    return y;
  }
  double random() {
    uint32_t a = next32() >> 5, b = next32() >> 6;
    return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
  }
  double gauss(double sigma) {
    double z;
    if (has_next) {
      z = gauss_next;
      has_next = false;
    } else {
      double x2pi = random() * 2.0 * M_PI;
      double g2rad = std::sqrt(-2.0 * std::log(1.0 - random()));
      z = std::cos(x2pi) * g2rad;
      gauss_next = std::sin(x2pi) * g2rad;
      has_next = true;
    }
    return 0.0 + z * sigma;
  }
};

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
};

struct WorkerState {  // margin_ns, _answer_seen_ns and answer_delays (RollingQuantile) per worker
  bool has_margin = false, has_seen = false, has_value = false;
  i64 margin = 0, seen = 0, value = 0;
  std::vector<i64> win;
  int whead = 0;
  i64 count = 0;
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
    for (int m = 0; m < nm; m++) {
      const Model& model = (*models)[m];
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

  void request_arrived(i64 now, Req r) {
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

  void result_returned(i64 now, i64 action_id, int status, i64 start, i64 end, i64 device) {
    (void)start;
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
      infer_returned(now, action_id, status, end, device, f, gpu);
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
  void rq_forget(WorkerState& w) {
    w.win.clear(); w.whead = 0; w.count = 0; w.has_value = false; w.value = 0;
  }

  void infer_returned(i64 now, i64 action_id, int status, i64 end, i64 device, InFlight& f,
                      Gpu* gpu) {
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
  void tick(i64 now) {
    if (!has_last_sweep || now - last_sweep >= c.reject_sweep) {
      has_last_sweep = true; last_sweep = now;
      expire_margins(now);
      if (p.kind == P_CLOCKWORK) reject_infeasible(now);  // baselines: every worker holds all
    }
    if (!guards.empty() && guards.top().first <= now + c.answer_guard) time_out_overdue(now);
    if (p.kind == P_CLOCKWORK) plan_infers(now);
    else baseline_plan(now);
    bool replicate = !has_last_replication || now - last_replication >= c.replication_check;
    if (replicate) { has_last_replication = true; last_replication = now; }
    plan_loads(now, replicate);
  }

  void time_out_overdue(i64 now) {
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

  void expire_margins(i64 now) {
    for (auto& w : workers) {
      if (w.has_margin && w.margin > c.completion_margin &&
          now - (w.has_seen ? w.seen : now) > c.margin_expiry) {
        w.has_margin = false;
        rq_forget(w);
      }
    }
  }

  bool feasibility(i64 now, int m, i64 deadline, bool* resident) {
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

  void reject_infeasible(i64 now) {
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

  struct Best { i64 urgency, start; int b, k; i64 est, deadline; };

  bool best_batch(i64 now, Gpu& g, int m, Best* best) {
    const Model& info = (*models)[m];
    int largest = info.largest;
    i64 floor = std::max(g.exec_free, g.loaded[m]);
    i64 reach = now + c.network_latency;
    auto& h = heaps[m];
    i64 deadline = h.front().key - margin(g.worker);
    if (h.size() == 1) {
      const Req& r = h.front();
      if (r.n > largest) return false;
      int b = info.padded[r.n];
      i64 est = exec_est(g, m, b);
      i64 start = std::max(floor, reach + (i64)((double)r.n * info.per_sample));
      if (start + est > deadline) return false;
      *best = {deadline - est, start, b, 1, est, deadline};
      return true;
    }
    std::vector<Req> head(h.begin(), h.end());
    size_t take = std::min(head.size(), (size_t)largest);
    std::partial_sort(head.begin(), head.begin() + take, head.end(), req_before);
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
      int b = info.padded[prefix[k - 1]];
      i64 est = exec_est(g, m, b);
      i64 start = std::max(floor, reach + (i64)inputs_ns[k - 1]);
      if (start + est <= deadline) {
        *best = {deadline - est, start, b, k, est, deadline};
        return true;
      }
    }
    return false;
  }

  bool holds_any(const Gpu& g, const std::vector<char>& set, int n_in_set) {
    if (!n_in_set) return false;
    for (int m = queues.head; m >= 0; m = queues.next[m])
      if (set[m] && g.loaded[m] != NONE) return true;
    return false;
  }

  void plan_infers(i64 now) {
    if (!queues.size) return;
    i64 horizon = now + c.schedule_ahead;
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
        for (int i = 0; i < best.k; i++) f.reqs.push_back(pop_queue(model));
        if (heaps[model].empty()) queues.remove(model);
        if (!touched[model]) { touched[model] = 1; touched_list.push_back(model); }
        i64 action_id = next_id++;
        i64 latest = std::min(best.start + c.infer_slack, best.deadline - best.est);
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

  double demand(i64 now, int m) {
    if (!queues.has(m)) return 0.0;
    auto& h = heaps[m];
    i64 num = (i64)h.size() * (*models)[m].min_exec_info;
    return (double)num / (double)std::max<i64>(1, h.front().key - now);
  }

  bool resident(int m) {
    for (auto& g : gpus) if (g.loaded[m] != NONE) return true;
    return false;
  }

  bool backlogged(i64 now, int m) {
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

  void plan_loads(i64 now, bool replicate) {
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

  bool find_victims(Gpu& g, i64 needed, std::vector<int>* victims) {
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

  // --- the baselines (baselines.py) -----------------------------------------------------
  void baseline_arrived(const Req& r0) {
    Req r = r0;
    r.key = r.arrival;  // FIFO per model
    if (p.kind == P_CLIPPER) p.slo = r.deadline - r.arrival;  // the SLO the AIMD aims at
    r.cold = !resident(r.model);
    push_queue(r);
  }

  i64 batch_for(i64 now, int m) {
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

  void clipper_observe(const InFlight& f, i64 device) {
    double current = clipper_batch[f.model] > 0 ? clipper_batch[f.model] : 1.0;
    double limit = (double)(*models)[f.model].batch_sizes.back();
    clipper_batch[f.model] = device > p.slo ? std::max(1.0, current * p.backoff)
                                            : std::min(limit, current + (double)p.aimd_step);
  }

  void baseline_plan(i64 now) {
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

  void send_batch(i64 now, Gpu& g, int model, i64 k) {
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

  i64 baseline_wakeup(i64 now) {
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

  i64 next_wakeup(i64 now) {
    if (p.kind != P_CLOCKWORK) return baseline_wakeup(now);
    while (!guards.empty() && !inflight.count(guards.top().second)) guards.pop();
    bool has_guard = !guards.empty();
    i64 guard = has_guard ? guards.top().first - c.answer_guard : 0;
    if (!queues.size) return has_guard ? std::max(now + 100000, guard) : NONE;
    i64 least = NONE;
    auto take = [&](i64 t) { if (least == NONE || t < least) least = t; };
    std::vector<char> all(nm, 0);
    for (int m = queues.head; m >= 0; m = queues.next[m]) all[m] = 1;
    for (auto& g : gpus)
      if (holds_any(g, all, queues.size)) take(g.exec_free - c.schedule_ahead);
    for (int m = queues.head; m >= 0; m = queues.next[m])
      take(heaps[m].front().key - c.completion_margin);
    if (has_guard) take(guard);
    return least == NONE ? NONE : std::max(now + 100000, least);
  }
};

// --- the simulation (simulate.py) ----------------------------------------------------------

struct SimGpu {
  i64 pages, free_pages, weights_free = 0, exec_free = 0, busy = 0;
  std::vector<i64> ready;  // model -> usable from, NONE if not resident
};

struct Event {
  i64 t;
  int kind;
  i64 seq, x;  // x: action id (RESULT) or model (ARRIVAL)
  bool operator>(const Event& o) const {
    if (t != o.t) return t > o.t;
    if (kind != o.kind) return kind > o.kind;
    return seq > o.seq;
  }
};

struct SentAction {  // a decision sent to a simulated worker, and its result
  int type, worker, gpu, model, batch, nreq;
  i64 earliest, latest, expected, sent;
  int status;
  i64 start, end, device;
};

struct SimReq { i64 arrival, deadline; int model; bool live; };

const int REQ_COLS = 16, ACT_COLS = 20;
const size_t CHUNK_ROWS = 65536;

struct Sim {
  Config c;
  std::vector<Model> models;
  Scheduler sched;
  std::vector<Decision> decisions;
  std::vector<SimGpu> gpus;  // index (worker - 1) * gpus_per_worker + gpu
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events;
  i64 seq = 0, now = 0, next_tick = NONE, slo = 0;
  std::vector<SimReq> requests;  // by request id
  std::unordered_map<i64, SentAction> actions;
  const SentAction* current = nullptr;
  PyRandom rng;
  // closed loop
  bool closed = false;
  i64 think = 0, duration = 0;
  // telemetry, handed to `sink` in chunks: the rows as int64 columns, and as the CSV lines
  // TelemetryLog would write for them (formatting them in Python cost more than simulating)
  std::vector<i64> req_rows, act_rows;
  std::string req_csv, act_csv;
  // CSV fields, as the csv module writes them: model names, request statuses, action
  // statuses, action kinds (indexed by their codes)
  std::vector<std::string> model_csv, rstatus_csv, status_csv, kind_csv;
  PyObject* sink = nullptr;
  bool failed = false;

  static void put(std::string& out, i64 v) {
    char buf[24];
    auto r = std::to_chars(buf, buf + sizeof buf, (long long)v);
    out.append(buf, r.ptr);
  }
  static void put_bool(std::string& out, i64 v) { out += v ? "True" : "False"; }
  static const std::string& field(const std::vector<std::string>& table, i64 code) {
    static const std::string unknown = "?";
    return code >= 0 && code < (i64)table.size() ? table[code] : unknown;
  }

  void push(i64 t, int kind, i64 x) { events.push({t, kind, seq++, x}); }

  i64 noisy(i64 ns) {
    if (c.noise == 0.0) return ns;
    return std::max<i64>(1, (i64)((double)ns * (1.0 + rng.gauss(c.noise))));
  }

  bool flush(bool requests_kind) {
    std::vector<i64>& rows = requests_kind ? req_rows : act_rows;
    std::string& csv = requests_kind ? req_csv : act_csv;
    if (rows.empty() || failed) return !failed;
    PyObject* data = PyBytes_FromStringAndSize((const char*)rows.data(),
                                               (Py_ssize_t)(rows.size() * sizeof(i64)));
    PyObject* text = PyBytes_FromStringAndSize(csv.data(), (Py_ssize_t)csv.size());
    rows.clear();
    csv.clear();
    if (!data || !text) {
      Py_XDECREF(data);
      Py_XDECREF(text);
      failed = true;
      return false;
    }
    PyObject* r = PyObject_CallFunction(sink, "sOO", requests_kind ? "requests" : "actions",
                                        data, text);
    Py_DECREF(data);
    Py_DECREF(text);
    if (!r) { failed = true; return false; }
    Py_DECREF(r);
    return true;
  }

  void apply() {
    // Decisions of one scheduler call, in order; a Finish for a closed-loop client may push
    // events, a sent action only sets state and pushes its result.
    std::vector<Decision> ds;
    ds.swap(decisions);
    for (auto& d : ds) {
      if (d.type == D_FINISH) finish(d);
      else deliver(d, now + c.network_ns);
    }
  }

  void deliver(const Decision& d, i64 t) {
    SimGpu& gpu = gpus[(size_t)(d.worker - 1) * c.gpus_per_worker + d.gpu];
    const Model& est = models[d.model];
    SentAction a{d.type, d.worker, d.gpu, d.model, d.batch, d.nreq, d.earliest, d.latest,
                 d.expected, now, S_OK, 0, 0, 0};
    i64 extra = 0;
    if (d.type == D_UNLOAD) {
      i64 start = std::max(t, d.earliest);
      if (gpu.ready[d.model] != NONE) {
        gpu.ready[d.model] = NONE;
        gpu.free_pages += models[d.model].pages;
      }
      a.start = a.end = start;
    } else if (d.type == D_LOAD) {
      i64 start = std::max(std::max(t, d.earliest), gpu.weights_free);
      a.start = a.end = start;
      if (start > d.latest) a.status = S_TOO_LATE;
      else if (gpu.ready[d.model] != NONE) a.status = S_ALREADY_LOADED;
      else if (models[d.model].pages > gpu.free_pages) a.status = S_NO_PAGES;
      else {
        i64 dur = noisy(est.sim_load);
        gpu.free_pages -= models[d.model].pages;
        gpu.weights_free = start + dur;
        gpu.ready[d.model] = start + dur;
        a.end = start + dur; a.device = dur;
      }
    } else {
      i64 start = std::max(std::max(t + est.sim_input[d.batch], d.earliest), gpu.exec_free);
      i64 ready = gpu.ready[d.model];
      a.start = a.end = start;
      if (ready == NONE) a.status = S_NOT_LOADED;
      else {
        start = std::max(start, ready);
        a.start = a.end = start;
        if (start > d.latest) a.status = S_TOO_LATE;
        else {
          i64 dur = noisy(est.sim_exec[d.batch]);
          gpu.exec_free = start + dur;
          gpu.busy += dur;
          a.end = start + dur; a.device = dur;
          extra = est.sim_output[d.batch];
        }
      }
    }
    push(std::max(a.end, t) + extra + c.network_ns, E_RESULT, d.id);
    actions.emplace(d.id, a);
  }

  void result(i64 action_id) {
    auto it = actions.find(action_id);
    SentAction a = it->second;
    actions.erase(it);
    bool infer = a.type == D_INFER;
    bool ran = a.status == S_OK;
    i64 expected_end = a.earliest + a.expected;
    int kind = infer ? K_INFER : a.type == D_LOAD ? K_LOAD : K_UNLOAD;
    i64 row[ACT_COLS] = {action_id, kind, a.status, a.worker, a.gpu, a.model,
                         infer ? a.batch : 0, infer ? a.nreq : 0, a.sent, a.earliest, a.latest,
                         a.expected, expected_end, ran ? a.start : 0, ran ? a.end : 0, a.device,
                         ran ? a.device - a.expected : 0, ran ? a.end - expected_end : 0, now, 1};
    act_rows.insert(act_rows.end(), row, row + ACT_COLS);
    for (int j = 0; j < ACT_COLS; j++) {
      if (j) act_csv += ',';
      if (j == 1) act_csv += field(kind_csv, row[j]);
      else if (j == 2) act_csv += field(status_csv, row[j]);
      else if (j == 5) act_csv += field(model_csv, row[j]);
      else if (j == 19) put_bool(act_csv, row[j]);
      else put(act_csv, row[j]);
    }
    act_csv += "\r\n";
    if (act_rows.size() >= CHUNK_ROWS * ACT_COLS) flush(false);
    current = &a;
    sched.result_returned(now, action_id, a.status, a.start, a.end, a.device);
    apply();
    current = nullptr;
  }

  void finish(const Decision& f) {
    if (f.id <= 0 || f.id >= (i64)requests.size() || !requests[f.id].live) return;
    SimReq& req = requests[f.id];
    req.live = false;
    i64 batch = 0, worker = -1, gpu = -1;
    if (f.rstatus == RS_OK) { batch = current->batch; worker = current->worker; gpu = current->gpu; }
    if (closed) {
      i64 nxt = now + 2 * c.network_ns + think;
      if (nxt < duration) push(nxt, E_ARRIVAL, req.model);
    }
    bool met = f.rstatus == RS_OK && now <= req.deadline;
    i64 row[REQ_COLS] = {f.id, req.model, 1, req.arrival, req.deadline,
                         req.deadline - req.arrival, now, now - req.arrival, f.rstatus, met,
                         batch, worker, gpu, f.action_id, f.cold, 1};
    req_rows.insert(req_rows.end(), row, row + REQ_COLS);
    for (int j = 0; j < REQ_COLS; j++) {
      if (j) req_csv += ',';
      if (j == 1) req_csv += field(model_csv, row[j]);
      else if (j == 8) req_csv += field(rstatus_csv, row[j]);
      else if (j == 9 || j == 14 || j == 15) put_bool(req_csv, row[j]);
      else put(req_csv, row[j]);
    }
    req_csv += "\r\n";
    if (req_rows.size() >= CHUNK_ROWS * REQ_COLS) flush(true);
  }

  void arrive(i64 id, int model) {
    if ((i64)requests.size() <= id) requests.resize(std::max<size_t>(id + 1, requests.size() * 2));
    requests[id] = {now, now + slo, model, true};
    Req r{id, now, now + slo, now + slo, model, 1, false};
    sched.request_arrived(now, r);
    apply();
  }

  void schedule_tick(i64 next_event) {
    i64 wake = sched.next_wakeup(now);
    if (wake != NONE && wake < next_event && (next_tick == NONE || wake < next_tick)) {
      next_tick = wake;
      push(wake, E_TICK, 0);
    }
  }

  // Simulation.run; arrivals as (times, model indices), or none for a closed loop.
  bool run(const i64* times, const int32_t* model_index, i64 n, PyObject* progress) {
    for (int w = 1; w <= c.workers; w++) sched.worker_joined(0, w, (int)c.gpus_per_worker,
                                                           c.pages_per_gpu);
    sched.tick(0);
    apply();
    i64 ai = 0, rid = 1, processed = 0;
    i64 next_arrival = n > 0 ? times[0] : NEVER;
    bool dirty = false;
    auto report = [&]() -> bool {
      if (processed % 5000 != 0) return true;
      if (PyErr_CheckSignals() < 0) return false;
      if (progress != Py_None) {
        PyObject* r = PyObject_CallFunction(progress, "LL", (long long)processed,
                                            (long long)now);
        if (!r) return false;
        Py_DECREF(r);
      }
      return true;
    };
    while (ai < n || !events.empty()) {
      if (ai < n && (events.empty() || next_arrival <= events.top().t)) {
        now = next_arrival;
        arrive(rid++, model_index[ai]);
        dirty = true;
        ai++;
        next_arrival = ai < n ? times[ai] : NEVER;
        processed++;
        if (!report()) return false;
      } else {
        Event e = events.top();
        events.pop();
        now = e.t;
        if (e.kind == E_RESULT) {
          result(e.x);
        } else if (e.kind == E_ARRIVAL) {
          arrive(rid++, (int)e.x);
          processed++;
          if (!report()) return false;
        } else {
          next_tick = NONE;
        }
        dirty = true;
      }
      if (failed) return false;
      if (dirty) {
        i64 nxt = events.empty() ? NEVER : events.top().t;
        if (next_arrival < nxt) nxt = next_arrival;
        if (nxt > now) {
          sched.tick(now);
          apply();
          dirty = false;
          schedule_tick(nxt);
        }
      }
    }
    if (progress != Py_None) {
      PyObject* r = PyObject_CallFunction(progress, "LL", (long long)processed, (long long)now);
      if (!r) return false;
      Py_DECREF(r);
    }
    return flush(true) && flush(false);
  }
};

// --- Python glue ---------------------------------------------------------------------------

bool get_i64(PyObject* seq, Py_ssize_t i, i64* v) {
  PyObject* o = PySequence_GetItem(seq, i);
  if (!o) return false;
  long long x = PyLong_AsLongLong(o);
  Py_DECREF(o);
  if (x == -1 && PyErr_Occurred()) return false;
  *v = x;
  return true;
}

bool get_f64(PyObject* seq, Py_ssize_t i, double* v) {
  PyObject* o = PySequence_GetItem(seq, i);
  if (!o) return false;
  double x = PyFloat_AsDouble(o);
  Py_DECREF(o);
  if (x == -1.0 && PyErr_Occurred()) return false;
  *v = x;
  return true;
}

bool get_i64_list(PyObject* seq, Py_ssize_t i, std::vector<i64>* out) {
  PyObject* o = PySequence_GetItem(seq, i);
  if (!o) return false;
  Py_ssize_t n = PySequence_Size(o);
  bool ok = n >= 0;
  for (Py_ssize_t j = 0; ok && j < n; j++) {
    i64 v;
    ok = get_i64(o, j, &v);
    if (ok) out->push_back(v);
  }
  Py_DECREF(o);
  return ok;
}

// run(config, models, times, model_index, closed, progress, sink, fields, policy)
//   config: 19 entries, Config's order (the seed as abs(seed)'s 32-bit words, least first) then
//   the SLO; models: per model (pages, batch_sizes, load_ns,
//   exec_ns items flattened [b, ns, ...], sample_bytes, sim_load, sim_exec, sim_input,
//   sim_output — the last three indexed by batch size; the rank of its name among the models');
//   times: int64 bytes; model_index: int32
//   bytes; closed: None or (concurrency, think_ns, duration_ns, model indices); progress(
//   processed, now) or None; sink(kind, int64 row bytes, CSV bytes); fields: the CSV renderings
//   (bytes) of model names, request statuses, action statuses and action kinds, by code;
//   policy: (P_* code, max batch, max queue delay ns, SLO ns, AIMD step, backoff).
//   Returns the virtual time it ended at.
PyObject* fastsim_run(PyObject*, PyObject* args) {
  PyObject *cfg, *ms, *times, *index, *closed, *progress, *sink, *fields, *policy;
  if (!PyArg_ParseTuple(args, "OOSSOOOOO", &cfg, &ms, &times, &index, &closed, &progress, &sink,
                        &fields, &policy))
    return nullptr;
  Sim* sim = new Sim();
  Policy& pol = sim->sched.p;
  i64 kind = -1;
  if (!(get_i64(policy, 0, &kind) && get_i64(policy, 1, &pol.max_batch) &&
        get_i64(policy, 2, &pol.max_queue_delay) && get_i64(policy, 3, &pol.slo) &&
        get_i64(policy, 4, &pol.aimd_step) && get_f64(policy, 5, &pol.backoff))) {
    delete sim;
    return nullptr;
  }
  if (kind < P_CLOCKWORK || kind > P_CLIPPER) {
    PyErr_SetString(PyExc_ValueError, "policy: 0 clockwork, 1 fifo, 2 batch-timeout, 3 clipper");
    delete sim;
    return nullptr;
  }
  pol.kind = (int)kind;
  std::vector<std::string>* tables[] = {&sim->model_csv, &sim->rstatus_csv, &sim->status_csv,
                                        &sim->kind_csv};
  bool fields_ok = PySequence_Size(fields) == 4;
  for (int t = 0; fields_ok && t < 4; t++) {
    PyObject* table = PySequence_GetItem(fields, t);
    Py_ssize_t n = table ? PySequence_Size(table) : -1;
    fields_ok = n >= 0;
    for (Py_ssize_t j = 0; fields_ok && j < n; j++) {
      PyObject* item = PySequence_GetItem(table, j);
      fields_ok = item && PyBytes_Check(item);
      if (fields_ok) tables[t]->emplace_back(PyBytes_AsString(item), PyBytes_Size(item));
      Py_XDECREF(item);
    }
    Py_XDECREF(table);
  }
  if (!fields_ok) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "fields: four lists of bytes");
    delete sim;
    return nullptr;
  }
  Config& c = sim->c;
  i64* ints[] = {&c.schedule_ahead, &c.infer_slack, &c.load_slack, &c.max_loads, &c.window,
                 &c.network_latency};
  bool ok = PySequence_Size(cfg) == 19;
  if (!ok && !PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "config: 19 numbers");
  for (int i = 0; ok && i < 6; i++) ok = get_i64(cfg, i, ints[i]);
  ok = ok && get_f64(cfg, 6, &c.input_ns_per_byte);
  i64* more[] = {&c.completion_margin, &c.margin_expiry, &c.answer_guard, &c.reject_sweep,
                 &c.replication_check, &c.workers, &c.gpus_per_worker, &c.pages_per_gpu,
                 &c.network_ns};
  for (int i = 0; ok && i < 9; i++) ok = get_i64(cfg, 7 + i, more[i]);
  ok = ok && get_f64(cfg, 16, &c.noise);
  std::vector<i64> seed_words;
  i64 slo = 0;
  ok = ok && get_i64_list(cfg, 17, &seed_words) && get_i64(cfg, 18, &slo);
  if (ok && seed_words.empty()) seed_words.push_back(0);
  sim->slo = slo;
  if (ok && (c.window < 1 || c.workers < 1 || c.gpus_per_worker < 1)) {
    PyErr_SetString(PyExc_ValueError, "window, workers and GPUs per worker must be >= 1");
    ok = false;
  }
  Py_ssize_t nm = ok ? PySequence_Size(ms) : -1;
  if (ok && nm == 0) PyErr_SetString(PyExc_ValueError, "no models");
  ok = ok && nm > 0;
  for (Py_ssize_t i = 0; ok && i < nm; i++) {
    PyObject* t = PySequence_GetItem(ms, i);
    if (!t) { ok = false; break; }
    Model m;
    std::vector<i64> sizes, exec_flat, sx, si, so;
    i64 sample_bytes = 0, rank = 0;
    ok = get_i64(t, 0, &m.pages) && get_i64_list(t, 1, &sizes) && get_i64(t, 2, &m.load_info) &&
         get_i64_list(t, 3, &exec_flat) && get_i64(t, 4, &sample_bytes) &&
         get_i64(t, 5, &m.sim_load) && get_i64_list(t, 6, &sx) && get_i64_list(t, 7, &si) &&
         get_i64_list(t, 8, &so) && get_i64(t, 9, &rank);
    sim->sched.name_rank.push_back((int)rank);
    Py_DECREF(t);
    if (!ok) break;
    if (sizes.empty() || exec_flat.empty() || exec_flat.size() % 2) {
      PyErr_SetString(PyExc_ValueError, "a model needs batch sizes and EXEC estimates");
      ok = false;
      break;
    }
    for (i64 b : sizes) m.batch_sizes.push_back((int)b);
    m.largest = m.batch_sizes.back();
    for (size_t j = 0; j < exec_flat.size(); j += 2) {
      m.exec_info.push_back({(int)exec_flat[j], exec_flat[j + 1]});
      m.min_exec_info = j == 0 ? exec_flat[1] : std::min(m.min_exec_info, exec_flat[j + 1]);
    }
    for (int n = 0; n <= m.largest; n++) {
      int p = m.largest;
      for (int b : m.batch_sizes) if (b >= n) { p = b; break; }
      m.padded.push_back(p);
    }
    m.per_sample = (double)sample_bytes * c.input_ns_per_byte;
    if ((int)sx.size() <= m.largest || (int)si.size() <= m.largest ||
        (int)so.size() <= m.largest) {
      PyErr_SetString(PyExc_ValueError, "simulated durations must cover every batch size");
      ok = false;
      break;
    }
    m.sim_exec = sx; m.sim_input = si; m.sim_output = so;
    sim->models.push_back(std::move(m));
  }
  Py_ssize_t nbytes = ok ? PyBytes_Size(times) : 0;
  Py_ssize_t n = nbytes / 8;
  if (ok && PyBytes_Size(index) != n * 4) {
    PyErr_SetString(PyExc_ValueError, "times and model indices differ in length");
    ok = false;
  }
  const i64* tp = ok ? (const i64*)PyBytes_AsString(times) : nullptr;
  const int32_t* ip = ok ? (const int32_t*)PyBytes_AsString(index) : nullptr;
  for (Py_ssize_t i = 0; ok && i < n; i++) {
    if (ip[i] < 0 || ip[i] >= nm) {
      PyErr_SetString(PyExc_ValueError, "an arrival names no model");
      ok = false;
    }
  }
  if (ok && closed != Py_None) {
    i64 concurrency;
    std::vector<i64> loop_models;
    ok = get_i64(closed, 0, &concurrency) && get_i64(closed, 1, &sim->think) &&
         get_i64(closed, 2, &sim->duration) && get_i64_list(closed, 3, &loop_models);
    for (i64 m : loop_models) {
      if (ok && (m < 0 || m >= nm)) {
        PyErr_SetString(PyExc_ValueError, "a closed-loop client names no model");
        ok = false;
      }
    }
    if (ok) {
      sim->closed = true;
      for (size_t i = 0; i < loop_models.size(); i++)
        for (i64 k = 0; k < concurrency; k++)  // staggered by a microsecond, as simulate.py
          sim->push(((i64)i * concurrency + k) * 1000, E_ARRIVAL, loop_models[i]);
    }
  }
  PyObject* result = nullptr;
  if (ok) {
    std::vector<uint32_t> key;
    for (i64 w : seed_words) key.push_back((uint32_t)w);
    sim->rng.seed(key);
    sim->sched.c = c;
    sim->sched.init(&sim->models, &sim->decisions);
    sim->gpus.resize((size_t)(c.workers * c.gpus_per_worker));
    for (auto& g : sim->gpus) {
      g.pages = g.free_pages = c.pages_per_gpu;
      g.ready.assign(nm, NONE);
    }
    sim->sink = sink;
    sim->requests.resize(1024);
    if (sim->run(tp, ip, n, progress)) {
      result = PyLong_FromLongLong((long long)sim->now);
    }
  }
  delete sim;
  return result;
}

PyMethodDef methods[] = {
    {"run", fastsim_run, METH_VARARGS, "Run one virtual-time simulation (see cw/replay/fastsim.py)."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastsim",
                      "Compiled virtual-time simulation with cw's scheduling policies.", -1, methods,
                      nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__fastsim(void) { return PyModule_Create(&module); }
