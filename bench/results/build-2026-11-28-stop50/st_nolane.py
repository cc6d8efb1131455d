# serve_throughput.py with the workers' result lane off (CW_RESULT_LANE=0), for an A/B
import os, runpy, sys
if os.environ.get("CW_RESULT_LANE") == "0":
    import cw.serve.launch as launch
    real = launch.ZmqRouter
    def no_lane(*a, **kw):
        kw["lane"] = False
        return real(*a, **kw)
    launch.ZmqRouter = no_lane
sys.argv[0] = "/work/main/bench/serve_throughput.py"
runpy.run_path("/work/main/bench/serve_throughput.py", run_name="__main__")
