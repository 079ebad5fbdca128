/* MSVC's /GS runtime, for linking the Windows wheel's sleef.lib (built by MSVC with
 * /GS) into a MinGW-built model DLL: MinGW's runtime has no __security_cookie,
 * __security_check_cookie or __GSHandlerCheck. The cookie is a fixed value here (no
 * per-process randomisation: sleef's buffers are not attacker-controlled), and the
 * unwind handler defers to the next (it only re-checks the cookie under MSVC). */
#include <stdint.h>
#include <windows.h>

uintptr_t __security_cookie = 0x00002B992DDFA232ULL;

void __security_check_cookie(uintptr_t cookie) {
    /* STATUS_STACK_BUFFER_OVERRUN, as MSVC's runtime ends the process */
    if (cookie != __security_cookie) TerminateProcess(GetCurrentProcess(), 0xC0000409);
}

EXCEPTION_DISPOSITION __GSHandlerCheck(void* record, void* frame, void* context, void* dispatch) {
    (void)record, (void)frame, (void)context, (void)dispatch;
    return ExceptionContinueSearch;
}
