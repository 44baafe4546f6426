"""SQL Server 2019/2022 CDC simulator that speaks TDS 7.4 (standard library only).

Layout (one job per module):

* ``packets``/``tokens``/``login``/``rpc``: the TDS wire protocol;
* ``sqltypes``/``timeutil``/``lsn``: exact value encodings;
* ``tsql``: T-SQL lexer, parser and translator to sqlite;
* ``catalog``/``model``/``capture``/``cleanup``/``permissions``: the CDC model;
* ``functions``/``sysprocs``/``control``/``faults``/``truth``: what clients can call;
* ``executor``/``session``/``server``/``traffic``/``cli``: running it.

See README.md beside this file for usage and the supported subset.
"""
