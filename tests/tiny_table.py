"""The tiny replay table the replay and simulate tests share: every outcome a row can have, a
baseline, the best."""

TINY = """tp_size,graph,proto,samples,failure,baseline,note
1,false,,10;10.2;9.9,,,NCCL does not matter at TP=1
1,true,,14;14.1,,,
2,false,LL,12;12.5;12.1,,1,
2,false,Simple,11;11.2,,,
2,true,LL,20;20.4;19.8,,,best
2,true,Simple,18;18.1,,,
2,true,LL128,,wrong-output,,
4,true,LL,,start-crash,,
"""
