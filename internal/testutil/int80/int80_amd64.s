#include "textflag.h"

// func Int80(nr uintptr) uintptr
TEXT ·Int80(SB), NOSPLIT, $0-16
	MOVQ	nr+0(FP), AX
	// i386 arguments: ebx, ecx, edx, esi, edi (ebp is left alone).
	XORL	BX, BX
	XORL	CX, CX
	XORL	DX, DX
	XORL	SI, SI
	XORL	DI, DI
	INT	$0x80
	MOVQ	AX, ret+8(FP)
	RET
