// main.cpp: the `stepgraph` command line (placeholder while the foundation is built).
#include <cstdio>
int main() { std::puts("stepgraph"); return 0; }
