import ctypes, sys, time
cu = ctypes.CDLL("libcuda.so.1")
def ok(r, what):
    if r != 0: print("cuda error", r, what, flush=True); sys.exit(1)
ok(cu.cuInit(0), "init")
dev = ctypes.c_int(); ok(cu.cuDeviceGet(ctypes.byref(dev), 0), "dev")
ctx = ctypes.c_void_p(); ok(cu.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev), "ctx")
mem = ctypes.c_uint64(); ok(cu.cuMemAlloc_v2(ctypes.byref(mem), ctypes.c_size_t(int(sys.argv[2]) << 20)), "alloc")
if sys.argv[1] == "busy":
    ptx = b""".version 7.0
.target sm_80
.address_size 64
.visible .entry spin(.param .u64 n)
{
  .reg .u64 %t0, %t1, %d, %n;
  .reg .pred %p;
  ld.param.u64 %n, [n];
  mov.u64 %t0, %clock64;
LOOP:
  mov.u64 %t1, %clock64;
  sub.u64 %d, %t1, %t0;
  setp.lt.u64 %p, %d, %n;
  @%p bra LOOP;
  ret;
}
"""
    mod = ctypes.c_void_p(); ok(cu.cuModuleLoadData(ctypes.byref(mod), ctypes.c_char_p(ptx)), "module")
    fn = ctypes.c_void_p(); ok(cu.cuModuleGetFunction(ctypes.byref(fn), mod, b"spin"), "func")
    n = ctypes.c_uint64(60 * 2000 * 1000 * 1000)
    args = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.byref(n), ctypes.c_void_p))
    ok(cu.cuLaunchKernel(fn, 264, 1, 1, 128, 1, 1, 0, None, args, None), "launch")
print("ready", sys.argv[1], flush=True)
time.sleep(float(sys.argv[3]))
