/* max ulp error of an exp variant (EXPF8 file) against exp in double, over float bit patterns with stride S */
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <stdlib.h>
#include EXPFILE
static double ulp_of(double v){ /* ulp of the float nearest v (denormals: 2^-149) */
  float f=(float)v; if(f==0||fabsf(f)<0x1p-126f) return 0x1p-149; int e; frexp(f,&e); return ldexp(1.0,e-24);}
int main(int argc,char**argv){
  long stride=argc>1?atol(argv[1]):7; double lo=argc>2?atof(argv[2]):-120, hi=argc>3?atof(argv[3]):100;
  double worst=0; float wx=0; long cnt=0; int bad=0;
  float xs[8];
  for(uint64_t b=0;b<0x100000000ull;b+=stride){
    uint32_t u=(uint32_t)b; float x; memcpy(&x,&u,4);
    if(!(x>=lo&&x<=hi)) continue;
    xs[cnt&7]=x; cnt++;
    if((cnt&7)==0){ wk_v8f v; memcpy(&v,xs,32); v=wk_expf8(v);
      for(int q=0;q<8;q++){ double ref=exp((double)xs[q]); double got=v[q];
        double e; if(isinf(ref>0x1.fffffep127?INFINITY:ref)||ref>0x1.fffffep127){ e = isinf(got)?0:1e9; }
        else e=fabs(got-ref)/ulp_of(ref);
        if(e>worst){worst=e;wx=xs[q];} } }
  }
  /* specials */
  float sp[8]={-INFINITY, INFINITY, NAN, -0.0f, 0.0f, -1e30f, 1e30f, -103.97f};
  wk_v8f v; memcpy(&v,sp,32); v=wk_expf8(v);
  for(int q=0;q<8;q++) printf("exp(%g)=%a ", sp[q], v[q]); printf("\n");
  printf("%s: max ulp %.3f at x=%a (%.9g), %ld values\n", EXPFILE, worst, wx, wx, cnt);
  return 0;}
