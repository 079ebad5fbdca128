"""Test rules: sh_test, test_suite, model_test; `kiln test` runs their targets."""
