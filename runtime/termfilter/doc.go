// Package termfilter stands between a sandbox's terminal and the caller's.
//
// It removes the control sequences that make the caller's terminal answer
// (the answer is typed back as input: cursor position, device attributes,
// the window title, settings, colours) or act outside the screen (the
// clipboard, printing, window moves, a change of character encoding), and
// passes everything else, text, colours, cursor motion, modes, byte for
// byte. Sequences may be split across writes.
package termfilter
