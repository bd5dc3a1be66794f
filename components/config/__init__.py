"""Stack configuration: ``StackConfig`` (every key, its default and validation), how a key is declared, the value
grammars every key and component parses with, and ``ArgError``."""
