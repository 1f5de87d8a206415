package gate

import (
	"encoding/binary"
	"runtime"
	"strings"
)

// Stub is the program mounted over every path of a gated program: run by
// any name, it writes Message(key) to stderr and exits 126. On amd64 it is
// a static ELF program of a few hundred bytes (no loader, no libc, so it
// runs in any root); on other architectures a /bin/sh script, which needs
// a shell in the root (without one, running it fails with 127).
func Stub(key string) []byte {
	msg := Message(key)
	if runtime.GOARCH == "amd64" {
		return elfAMD64(msg)
	}
	return []byte("#!/bin/sh\nprintf '%s' " + shellQuote(msg) + " >&2\nexit 126\n")
}

// StubExit is the exit status of a stub.
const StubExit = 126

// elfAMD64 builds a static x86-64 ELF executable that does
// write(2, msg, len(msg)) and exit_group(126).
func elfAMD64(msg string) []byte {
	const (
		base    = 0x400000
		ehSize  = 64
		phSize  = 56
		codeOff = ehSize + phSize
	)
	code := []byte{
		0xb8, 0x01, 0x00, 0x00, 0x00, // mov eax, 1 (write)
		0xbf, 0x02, 0x00, 0x00, 0x00, // mov edi, 2
		0x48, 0x8d, 0x35, 0, 0, 0, 0, // lea rsi, [rip+msg]
		0xba, 0, 0, 0, 0, // mov edx, len
		0x0f, 0x05, // syscall
		0xb8, 0xe7, 0x00, 0x00, 0x00, // mov eax, 231 (exit_group)
		0xbf, StubExit, 0x00, 0x00, 0x00, // mov edi, 126
		0x0f, 0x05, // syscall
	}
	// rip after the lea is at offset 17 of the code; msg follows the code.
	binary.LittleEndian.PutUint32(code[13:], uint32(len(code)-17))
	binary.LittleEndian.PutUint32(code[18:], uint32(len(msg)))
	total := codeOff + len(code) + len(msg)

	b := make([]byte, total)
	le := binary.LittleEndian
	copy(b, []byte{0x7f, 'E', 'L', 'F', 2 /* 64-bit */, 1 /* little endian */, 1 /* version */})
	le.PutUint16(b[16:], 2)    // e_type: ET_EXEC
	le.PutUint16(b[18:], 0x3e) // e_machine: x86-64
	le.PutUint32(b[20:], 1)    // e_version
	le.PutUint64(b[24:], base+codeOff)
	le.PutUint64(b[32:], ehSize) // e_phoff
	le.PutUint16(b[52:], ehSize) // e_ehsize
	le.PutUint16(b[54:], phSize) // e_phentsize
	le.PutUint16(b[56:], 1)      // e_phnum
	ph := b[ehSize:]
	le.PutUint32(ph[0:], 1) // PT_LOAD
	le.PutUint32(ph[4:], 5) // PF_R|PF_X
	le.PutUint64(ph[8:], 0) // p_offset
	le.PutUint64(ph[16:], base)
	le.PutUint64(ph[24:], base)
	le.PutUint64(ph[32:], uint64(total))
	le.PutUint64(ph[40:], uint64(total))
	le.PutUint64(ph[48:], 0x1000)
	copy(b[codeOff:], code)
	copy(b[codeOff+len(code):], msg)
	return b
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
