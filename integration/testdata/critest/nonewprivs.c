/* nonewprivs: installed setuid root; prints the effective uid it got, which
 * is 0 unless no_new_privs stopped the setuid bit. */
#include <stdio.h>
#include <unistd.h>

int main(void) {
	printf("Effective uid: %d\n", (int)geteuid());
	return 0;
}
