// fork_loop: forks FORKS children one after the other; each exits at once
// with _exit (no exit handlers, so no exit snapshot), and the parent waits
// for each. What a fork costs a program under the shim, apart from the
// program's own work (bench/process_cost_bench.sh).
//
//   bench_fork_loop [FORKS=200]
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char** argv) {
  const int forks = argc > 1 ? atoi(argv[1]) : 200;
  // One live block, so the parent's tables are in use as a server's are.
  void* kept = malloc(100);
  for (int i = 0; i < forks; ++i) {
    const pid_t child = fork();
    if (child < 0) return 1;
    if (child == 0) _exit(0);
    int status = 0;
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status)) return 1;
  }
  free(kept);
  return 0;
}
