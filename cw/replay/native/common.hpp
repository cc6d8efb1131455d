// Types and constants every part of the compiled simulator shares.

#pragma once

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

namespace cwsim {


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
  i64 adapt_slack;
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



}  // namespace cwsim
