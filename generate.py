"""Sample text from a trained language model (GPT, Llama), decoding with the KV cache
(the same as ``python -m zoo generate``; the code is zoo/cli/generate.py).

    python generate.py ckpt=outputs/train/<run>/checkpoints/last.ckpt prompt="ROMEO:" temperature=0.8 top_k=200
"""

from zoo.cli.commands import hydra_main

main = hydra_main("generate")

if __name__ == "__main__":
    main()
