/* Holds a shared file's mutex byte (core/base/shm.h kMutexByte) with an open-file-description
 * lock, as a stopped or hung member would, until its stdin closes. Prints "held" once it has it. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char** argv) {
  int fd = open(argv[1], O_RDWR);
  struct flock l = {0};
  l.l_type = F_WRLCK;
  l.l_whence = SEEK_SET;
  l.l_start = 1 << 20;
  l.l_len = 1;
  if (fd < 0 || fcntl(fd, F_OFD_SETLK, &l) != 0) return perror(argv[1]), 1;
  printf("held\n");
  fflush(stdout);
  char c;
  while (read(0, &c, 1) > 0) {
  }
  return 0;
}
