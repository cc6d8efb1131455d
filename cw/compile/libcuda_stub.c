/* A stand-in for the NVIDIA driver (libcuda.so.1) on machines without a GPU.
 *
 * TVM's CUDA runtime library links libcuda.so.1; without it the library fails to load and TVM
 * silently emits CUDA *source* instead of device binaries. Loading this stub first lets TVM
 * compile cubin/fatbin kernels on a build machine. Every call reports that there is no device, so
 * nothing can run here, and the stub never ends up in a compiled bundle. */
typedef int CUresult;
#define CUDA_ERROR_NO_DEVICE 100
#define STUB(name) CUresult name() { return CUDA_ERROR_NO_DEVICE; }

static const char no_device[] = "CUDA_ERROR_NO_DEVICE (cw build-machine stub driver)";

CUresult cuGetErrorName(int error, const char **out) { (void)error; *out = no_device; return 0; }
CUresult cuGetErrorString(int error, const char **out) { (void)error; *out = no_device; return 0; }
CUresult cuDriverGetVersion(int *version) { *version = 0; return CUDA_ERROR_NO_DEVICE; }
CUresult cuDeviceGetCount(int *count) { *count = 0; return CUDA_ERROR_NO_DEVICE; }
STUB(cuInit)
STUB(cuDeviceGet)
STUB(cuDeviceGetName)
STUB(cuDeviceGetAttribute)
STUB(cuCtxGetCurrent)
STUB(cuCtxSetCurrent)
STUB(cuDevicePrimaryCtxRetain)
STUB(cuFuncSetAttribute)
STUB(cuLaunchKernel)
STUB(cuLaunchKernelEx)
STUB(cuModuleGetFunction)
STUB(cuModuleGetGlobal)
STUB(cuModuleLoadData)
STUB(cuModuleUnload)
STUB(cuTensorMapEncodeTiled)
STUB(cuGetProcAddress)
STUB(cuGetProcAddress_v2)
