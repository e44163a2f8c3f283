/*
 * Debian 12's Wine (8.0) has no bcryptprimitives.dll, whose ProcessPrng Bun's
 * Windows runtime imports at start (Wine: "Library bcryptprimitives.dll ...
 * not found", status c0000135). This stand-in, built with mingw-w64 and put
 * beside kpng-windows-amd64.exe for the test only, answers ProcessPrng with
 * RtlGenRandom (advapi32's SystemFunction036), as Windows' own does with the
 * system RNG. It is never shipped: real Windows has the DLL.
 */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG len);

BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len) { return SystemFunction036(data, (ULONG)len); }
