"""Other tools' result files: read as run folders (vllm bench serve, GuideLLM, AIPerf), written as
llm-d benchmark reports; and what each tool means by the figures it names."""
