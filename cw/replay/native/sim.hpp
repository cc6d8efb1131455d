// The simulation: cw/replay/simulate.py, event for event.

#pragma once

#include "clockwork.hpp"
#include "baselines.hpp"
#include "rng.hpp"
#include <deque>

namespace cwsim {

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
  i64 start, end, device, result_sent = 0;
};

struct SimReq { i64 arrival, deadline; int model; bool live; };

const int REQ_COLS = 16, ACT_COLS = 21;
const size_t CHUNK_ROWS = 65536;

struct Sim {
  Config c;
  std::vector<Model> models;
  Scheduler sched;
  std::vector<Decision> decisions;
  std::vector<SimGpu> gpus;  // index (worker - 1) * gpus_per_worker + gpu
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events;
  i64 seq = 0, now = 0, next_tick = NONE, slo = 0;
  // the requests from the oldest one still unanswered on, by id - first_id: a run of millions
  // holds only those in flight (ids are handed out in arrival order)
  std::deque<SimReq> requests;
  i64 first_id = 0;
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
    a.result_sent = std::max(a.end, t) + extra;  // once the output is copied out
    push(a.result_sent + c.network_ns, E_RESULT, d.id);
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
                         ran ? a.device - a.expected : 0, ran ? a.end - expected_end : 0,
                         a.result_sent, now, 1};
    act_rows.insert(act_rows.end(), row, row + ACT_COLS);
    for (int j = 0; j < ACT_COLS; j++) {
      if (j) act_csv += ',';
      if (j == 1) act_csv += field(kind_csv, row[j]);
      else if (j == 2) act_csv += field(status_csv, row[j]);
      else if (j == 5) act_csv += field(model_csv, row[j]);
      else if (j == ACT_COLS - 1) put_bool(act_csv, row[j]);
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
    i64 at = f.id - first_id;
    if (f.id <= 0 || at < 0 || at >= (i64)requests.size() || !requests[at].live) return;
    const SimReq req = requests[at];
    requests[at].live = false;
    while (!requests.empty() && !requests.front().live) {
      requests.pop_front();
      first_id++;
    }
    i64 batch = 0, worker = -1, gpu = -1;
    if (f.rstatus == RS_OK) {  // the INFER whose result is being applied
      batch = current->batch;
      worker = current->worker;
      gpu = current->gpu;
    }
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
    if (requests.empty()) first_id = id;
    while (first_id + (i64)requests.size() <= id) requests.push_back({0, 0, 0, false});
    requests[id - first_id] = {now, now + slo, model, true};
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


}  // namespace cwsim
