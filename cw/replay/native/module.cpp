// cw.replay._fastsim: the virtual-time simulation of cw/replay/simulate.py with the policies of
// cw/serve/scheduler/ (clockwork.py, baselines.py), compiled. It takes the same decisions in the
// same order as the Python code it mirrors (tests/integration/test_fastsim.py compares the
// telemetry byte for byte), so a change to one of those Python modules must be made here too.
//
// common.hpp, rng.hpp   shared types; Python's random.Random
// scheduler.hpp         the scheduler's state and bookkeeping (base.py)
// clockwork.hpp         the Clockwork policy (clockwork.py)
// baselines.hpp         fifo, batch-timeout, clipper (baselines.py)
// sim.hpp               the event loop and simulated workers (simulate.py)
// module.cpp            the Python entry point (cw/replay/fastsim.py calls it); one translation
//                       unit that includes the rest
//
// Why it exists: issue 6 asks for virtual/wall >= 100 at 1,000 r/s, i.e. <= 10 us per request
// for everything, and the Python event loop alone needs ~9 us (docs/benchmarks.md).
//
// Names follow the Python code; comments there explain the policy. Only what a simulation needs
// is here: workers join once at time 0 and hold every model, requests carry one sample through
// the socket (never shared memory), and Finish messages carry no text.
//
// Built against the stable ABI (Python >= 3.11), so one build loads on 3.11 and 3.12.

#include "sim.hpp"

namespace cwsim {

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
  bool ok = PySequence_Size(cfg) == 20;
  if (!ok && !PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "config: 20 numbers");
  for (int i = 0; ok && i < 6; i++) ok = get_i64(cfg, i, ints[i]);
  ok = ok && get_f64(cfg, 6, &c.input_ns_per_byte);
  i64* more[] = {&c.completion_margin, &c.margin_expiry, &c.answer_guard, &c.reject_sweep,
                 &c.replication_check, &c.workers, &c.gpus_per_worker, &c.pages_per_gpu,
                 &c.network_ns};
  for (int i = 0; ok && i < 9; i++) ok = get_i64(cfg, 7 + i, more[i]);
  ok = ok && get_f64(cfg, 16, &c.noise);
  std::vector<i64> seed_words;
  i64 slo = 0;
  ok = ok && get_i64_list(cfg, 17, &seed_words) && get_i64(cfg, 18, &slo) &&
       get_i64(cfg, 19, &c.adapt_slack);
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
    if (sim->run(tp, ip, n, progress)) {
      result = PyLong_FromLongLong((long long)sim->now);
    }
  }
  delete sim;
  return result;
}

PyMethodDef methods[] = {
    {"run", fastsim_run, METH_VARARGS,
     "Run one virtual-time simulation (see cw/replay/fastsim.py)."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastsim",
                      "Compiled virtual-time simulation with cw's scheduling policies.", -1,
                      methods, nullptr, nullptr, nullptr, nullptr};

}  // namespace cwsim

PyMODINIT_FUNC PyInit__fastsim(void) { return PyModule_Create(&cwsim::module); }
