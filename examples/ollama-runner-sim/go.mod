module retain.example/ollama-runner-sim

go 1.19
